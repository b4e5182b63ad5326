# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""Every unit test file is where doc/source/contributor/layout.rst says.

A test about one module mirrors it: ``composable/<path>/<module>.py`` is
tested in ``tests/unit/<path>/test_<module>.py`` (or
``test_<module>_<aspect>.py`` when one module has several files; a
package's ``__init__.py`` in ``test_<package>[_<aspect>].py``, a whole
subpackage in ``test_<subpackage>[_<aspect>].py`` beside it). The
scripts of ``tools/`` are mirrored the same way under ``tests/unit/tools/``
(a dash in a script's name is an underscore in its test's). A test that
crosses modules lives in one of the feature folders below, whose names say
what they test; at the top only the checks of the whole tree."""

import os

UNIT = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(UNIT))

# Folder (relative to tests/unit) -> what its tests cover. Any test file
# name is allowed in them; keep this list and layout.rst's in step.
FEATURE_FOLDERS = {
    'api': 'the REST API through its WSGI application, with whatever '
           'stands behind it (a real conductor and agents in-process)',
    'devstack': 'the DevStack plugin (devstack/) and '
                'tools/devstack-check.sh, against stand-ins of DevStack',
    'scenarios/cli': 'the openstack command installed and run against '
                     'the real API application',
    'scenarios/console_scripts': 'the console scripts as an operator '
                                 'runs them, each in a process of its own',
    'scenarios/lease_flows': 'leases through the conductor and real '
                             'agents when parts fail, secrets, scrubbing, '
                             'SR-IOV functions',
    'scenarios/notifications': 'notifications sent by the database '
                               'writes, the fabric sync and the conductor',
    'scenarios/placement': 'the service with Placement switched off',
    'scenarios/usage': 'usage samples from the agents to the conductor '
                       'and the API',
}

# Files at the top of tests/unit: checks of the whole tree.
TOP_LEVEL = {'test_import_layers.py', 'test_layout.py'}

# tests/unit/<root>/... mirrors <repo>/<source>/...
MIRRORS = {'tools': 'tools'}
DEFAULT_SOURCE = 'composable'


def _subjects(source_dir):
    """The names a test file in the mirror of ``source_dir`` may name:
    its modules and scripts, its subpackages and the package itself."""
    names = {os.path.basename(source_dir)}
    for entry in os.listdir(source_dir):
        path = os.path.join(source_dir, entry)
        if os.path.isdir(path):
            if entry != '__pycache__':
                names.add(entry)
            continue
        stem, ext = os.path.splitext(entry)
        if ext in ('.py', '.sh') and stem != '__init__':
            names.add(stem.replace('-', '_'))
    return names


def _names_a_subject(subject, names):
    return any(subject == name or subject.startswith(name + '_')
               for name in names)


def misplaced(unit_dir=UNIT, repo=REPO):
    """(path relative to unit_dir, why) of each test file out of place."""
    found = []
    for dirpath, dirnames, filenames in os.walk(unit_dir):
        dirnames[:] = [d for d in dirnames if d != '__pycache__']
        folder = os.path.relpath(dirpath, unit_dir).replace(os.sep, '/')
        for filename in sorted(filenames):
            if not (filename.startswith('test_') and
                    filename.endswith('.py')):
                continue
            if folder == '.':
                if filename not in TOP_LEVEL:
                    found.append((filename, 'a test at the top of '
                                  'tests/unit that is not a check of the '
                                  'whole tree'))
                continue
            rel = '%s/%s' % (folder, filename)
            if any(folder == f or folder.startswith(f + '/')
                   for f in FEATURE_FOLDERS):
                continue
            parts = folder.split('/')
            if parts[0] in MIRRORS:
                source = os.path.join(repo, MIRRORS[parts[0]], *parts[1:])
            else:
                source = os.path.join(repo, DEFAULT_SOURCE, *parts)
            if not os.path.isdir(source):
                found.append((rel, '%s is neither a package nor a '
                              'feature folder' % os.path.relpath(
                                  source, repo)))
                continue
            subject = filename[len('test_'):-len('.py')]
            if not _names_a_subject(subject, _subjects(source)):
                found.append((rel, 'names no module of %s' %
                              os.path.relpath(source, repo)))
    return found


def test_every_unit_test_file_mirrors_its_module_or_is_a_feature_test():
    found = misplaced()
    assert not found, (
        'test files out of place (doc/source/contributor/layout.rst, '
        '"Where a new test goes"): a test of composable/<path>/<module>.py '
        'goes to tests/unit/<path>/test_<module>[_<aspect>].py, a test '
        'across modules to a folder of FEATURE_FOLDERS in %s:\n%s' % (
            __file__, '\n'.join('  %s: %s' % f for f in found)))


def test_the_feature_folders_exist():
    missing = [f for f in FEATURE_FOLDERS
               if not os.path.isdir(os.path.join(UNIT, f))]
    assert not missing


def _tree(root, files):
    for path in files:
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, 'w'):
            pass


def test_a_misplaced_file_is_found(tmp_path):
    _tree(str(tmp_path), [
        'composable/conductor/__init__.py',
        'composable/conductor/flows.py',
        'composable/conductor/nova/__init__.py',
        'composable/conductor/nova/binding.py',
        'tools/newcomer-check.py',
    ])
    unit = os.path.join(str(tmp_path), 'tests', 'unit')
    good = [
        'conductor/test_flows.py',
        'conductor/test_flows_faults.py',
        'conductor/test_nova.py',
        'conductor/test_conductor.py',
        'conductor/nova/test_binding.py',
        'tools/test_newcomer_check.py',
        'scenarios/lease_flows/test_anything.py',
        'api/test_anything.py',
        'test_layout.py',
        'conductor/helpers.py',
    ]
    bad = [
        'conductor/test_flowsfaults.py',
        'conductor/test_fault_flows.py',
        'compute_node/test_host_pci.py',
        'conductor/nova/test_flows.py',
        'scenarios/test_loose.py',
        'tools/test_trace_gen.py',
        'test_something.py',
    ]
    _tree(unit, good + bad)
    assert sorted(path for path, _why in misplaced(unit, str(tmp_path))) \
        == sorted(bad)
