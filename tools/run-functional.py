#!/usr/bin/env python3
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

"""Run the functional tests as two pytest runs side by side.

Much of a functional test waits (services starting, guests booting under
TCG, polling), so two runs keep two cores busier than one. They are split
by what they share on the machine:

- the tests that use what the machine has only one of -- libvirtd (one
  test adds a hook and reloads it), tgtd, the data plane's tmpfs areas and
  swap -- run one after another in one run (``MACHINE``);
- every other folder runs in the other.

Each run is a run of its own to the leftover check (its own tag: see
tests/functional/leftovers.py), writes its own JUnit file, and its output
is printed whole when it ends. The exit status is the worse of the two.
With arguments (a test or a folder of one's choosing), one pytest run
takes them as they are.

Usage: run-functional.py JUNIT_PREFIX [PYTEST ARGS...]
"""

import os
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_PYTEST = os.path.join(HERE, 'run-pytest.py')
ROOT = 'tests/functional'
MACHINE = ['compute_host', 'compute_node', 'cxl_host', 'dataplane', 'guest',
           'hooks', 'memory']
# Whatever is in folders of their own elsewhere (a browser's, say) is not
# for this tier.
ELSEWHERE = ['horizon']
# The leftover check's own tests mount and start processes: with the
# machine's.
MACHINE_FILES = ['test_leftovers.py']


def shards(junit_prefix):
    machine = [os.path.join(ROOT, name) for name in MACHINE + MACHINE_FILES]
    rest = [ROOT] + ['--ignore=%s' % path for path in machine] + [
        '--ignore=%s' % os.path.join(ROOT, name) for name in ELSEWHERE]
    return [
        ('machine', machine + ['--junitxml=%s-machine.xml' % junit_prefix]),
        ('services', rest + ['--junitxml=%s.xml' % junit_prefix]),
    ]


def main(argv):
    if not argv:
        print(__doc__)
        return 2
    junit_prefix, args = argv[0], argv[1:]
    base = [sys.executable, RUN_PYTEST, '-q', '-ra']
    if args:
        return subprocess.call(
            base + ['--junitxml=%s.xml' % junit_prefix] + args)
    running = []
    for name, shard_args in shards(junit_prefix):
        out = tempfile.TemporaryFile(mode='w+')
        # The run's tag comes from each run itself: none is inherited.
        env = dict(os.environ)
        env.pop('COMPOSABLE_TEST_RUN', None)
        proc = subprocess.Popen(base + shard_args, stdout=out,
                                stderr=subprocess.STDOUT, env=env)
        running.append((name, proc, out))

    def stop(signum, frame):
        # Each run turns SIGTERM into an interruption that still cleans
        # up (tests/functional/conftest.py); wait for them to do so.
        for _name, proc, _out in running:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    rc = 0
    for name, proc, out in running:
        code = proc.wait()
        out.seek(0)
        print('======== functional tests: %s (exit %d) ========' %
              (name, code))
        sys.stdout.write(out.read())
        sys.stdout.flush()
        rc = max(rc, code)
    return rc


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
