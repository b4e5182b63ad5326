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

"""Cross-cutting: how composable's modules import each other, read from
their source (every import statement, those inside functions included).

* No import circle.
* Only the database layer (composable/db/) touches the tables: no module
  outside it imports sqlalchemy (any of its modules), oslo_db.sqlalchemy
  or composable.db.models. Queries, locks and transactions are functions
  of composable.db; the rest calls them, and neither opens a transaction
  (writer, reader, the engine) nor hands a session to one of them.
* The privileged modules (composable/privsep/) are leaves: besides the
  standard library and third-party packages they import only each other,
  composable.conf (the option declarations the privsep daemon reads
  its settings with) and the few modules of composable.common listed in
  PRIVSEP_MAY_IMPORT (composable.common.locator, which parses what the
  PCI functions are given); those in turn import nothing else of
  composable.
"""

import ast
import os
import sys

import composable

PACKAGE_DIR = os.path.dirname(os.path.abspath(composable.__file__))
ROOT = os.path.dirname(PACKAGE_DIR)


def _modules(top=PACKAGE_DIR):
    """{dotted module name: path} of every module under ``top``."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if d != '__pycache__']
        for name in filenames:
            if not name.endswith('.py'):
                continue
            path = os.path.join(dirpath, name)
            dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, '.')
            if dotted.endswith('.__init__'):
                dotted = dotted[:-len('.__init__')]
            found[dotted] = path
    return found


def _package_of(module, path):
    return module if path.endswith('__init__.py') else \
        module.rpartition('.')[0]


def imports_of(module, path, known):
    """The composable modules ``module`` (at ``path``) imports."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                package = _package_of(module, path)
                for _ in range(node.level - 1):
                    package = package.rpartition('.')[0]
                base = '.'.join(p for p in (package, base) if p)
            names = []
            for alias in node.names:
                full = '%s.%s' % (base, alias.name)
                names.append(full if full in known else base)
        else:
            continue
        out.update(n for n in names
                   if n.split('.')[0] == 'composable' and n in known)
    out.discard(module)
    return out


def import_graph():
    known = _modules()
    return {m: imports_of(m, p, known) for m, p in known.items()}


def cycles(graph):
    """The import circles of ``graph`` (strongly connected components of
    more than one module), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(start):
        # Iterative Tarjan: the graph is deep enough for recursion limits.
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_circle():
    graph = {'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}, 'e': set()}
    assert cycles(graph) == [['a', 'b', 'c']]
    assert cycles({'a': {'b'}, 'b': set()}) == []


def test_the_graph_sees_imports_inside_functions(tmp_path):
    path = tmp_path / 'm.py'
    path.write_text('def f():\n    from composable.common import states\n'
                    '    import composable.conf\n')
    known = {'composable.common.states': '', 'composable.conf': ''}
    assert imports_of('composable.x', str(path), known) == {
        'composable.common.states', 'composable.conf'}


def test_no_import_circle():
    assert cycles(import_graph()) == []


def _outside(module, allowed):
    return not any(module == a or module.startswith(a + '.')
                   for a in allowed)


# What only the database layer may import: the SQL toolkit, oslo.db's
# engine and session machinery, and the models (the tables).
DB_LAYER = ('composable.db',)
DB_ONLY = ('sqlalchemy', 'oslo_db.sqlalchemy', 'composable.db.models')


def db_only_imports(module, path):
    """(line, imported name) of every import in the source at ``path``
    (module ``module``) that only the database layer may make: a module
    of DB_ONLY or anything under one, however it is spelled (import a.b,
    from a import b, from a.b import c, relative imports, inside
    functions too)."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                package = _package_of(module, path)
                for _ in range(node.level - 1):
                    package = package.rpartition('.')[0]
                base = '.'.join(p for p in (package, base) if p)
            names = [base] + ['%s.%s' % (base, alias.name)
                              for alias in node.names]
        else:
            continue
        wrong = sorted({n for n in names if not _outside(n, DB_ONLY)})
        if wrong:
            found.append((node.lineno, wrong[0]))
    return found


def test_the_db_import_finder_finds_them(tmp_path):
    path = tmp_path / 'm.py'
    path.write_text('import os\n'
                    'import sqlalchemy.orm\n'
                    'from sqlalchemy import orm\n'
                    'from oslo_db.sqlalchemy import enginefacade\n'
                    'from oslo_db import sqlalchemy\n'
                    'from oslo_db import exception\n'
                    'def f():\n'
                    '    from composable.db import models\n'
                    '    from composable.db import api\n'
                    '    from ..db import models as m\n'
                    '    import composable.db.models\n'
                    'import sqlalchemy_utils\n')
    assert db_only_imports('composable.conductor.x', str(path)) == [
        (2, 'sqlalchemy.orm'), (3, 'sqlalchemy'),
        (4, 'oslo_db.sqlalchemy'), (5, 'oslo_db.sqlalchemy'),
        (8, 'composable.db.models'), (10, 'composable.db.models'),
        (11, 'composable.db.models')]


def test_only_the_database_layer_imports_sqlalchemy_or_the_models():
    # Every query, lock and transaction is a function of composable.db
    # (the allocator's claims are composable.db.allocation); a module
    # elsewhere that needs rows calls one, or a new one is added there.
    modules = _modules()
    assert 'composable.db.allocation' in modules
    assert 'composable.conductor.allocator.claims' in modules
    wrong = {}
    for module, path in sorted(modules.items()):
        if not _outside(module, DB_LAYER):
            continue
        found = db_only_imports(module, path)
        if found:
            wrong[module] = found
    assert wrong == {}
    # And the database layer itself does import them (the check looks).
    assert db_only_imports('composable.db.allocation',
                           modules['composable.db.allocation'])


# The database layer's doors to a transaction: opening one (writer,
# reader, the engine), and every function of composable.db that runs in
# a transaction its caller holds (its first parameter is that session).
# Outside composable/db/ none is used and no session is passed along: a
# caller asks for what it needs and composable.db runs it in one
# transaction (the claim batches: composable.db.allocation.
# claim_batch_once).
TRANSACTION_OPENERS = ('writer', 'reader', 'get_engine', 'reset_facade')


def session_helpers(modules):
    """{db module: names of its transaction helpers}: TRANSACTION_OPENERS
    where it defines them, and its public functions whose first
    parameter is ``session``."""
    helpers = {}
    for module, path in modules.items():
        if _outside(module, DB_LAYER):
            continue
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        names = set()
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or \
                    node.name.startswith('_'):
                continue
            first = node.args.args[0].arg if node.args.args else None
            if node.name in TRANSACTION_OPENERS or first == 'session':
                names.add(node.name)
        helpers[module] = names
    return helpers


def session_helper_uses(module, path, helpers):
    """(line, text) of every use, in the source at ``path`` (module
    ``module``), of a transaction helper of ``helpers`` (see
    session_helpers): ``db_api.writer``, ``from composable.db.api import
    writer``, ``composable.db.allocation.create_in``, and any call of a
    db module's function with a ``session`` argument."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    # Local name -> the db module it stands for.
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in helpers:
                    if alias.asname:
                        aliases[alias.asname] = alias.name
                    else:
                        # import composable.db.api: used by its full name.
                        aliases[alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                package = _package_of(module, path)
                for _ in range(node.level - 1):
                    package = package.rpartition('.')[0]
                base = '.'.join(p for p in (package, base) if p)
            for alias in node.names:
                full = '%s.%s' % (base, alias.name)
                if full in helpers:
                    aliases[alias.asname or alias.name] = full
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                package = _package_of(module, path)
                for _ in range(node.level - 1):
                    package = package.rpartition('.')[0]
                base = '.'.join(p for p in (package, base) if p)
            found.extend((node.lineno, '%s.%s' % (base, alias.name))
                         for alias in node.names
                         if alias.name in helpers.get(base, ()))
        elif isinstance(node, ast.Attribute):
            owner = aliases.get(ast.unparse(node.value))
            if owner and node.attr in helpers[owner]:
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call) and \
                isinstance(node.func, ast.Attribute) and \
                aliases.get(ast.unparse(node.func.value)) and \
                any(k.arg == 'session' for k in node.keywords):
            found.append((node.lineno, ast.unparse(node.func) +
                          '(session=...)'))
    return sorted(set(found))


def test_the_session_helper_finder_finds_them(tmp_path):
    db_dir = tmp_path / 'db'
    db_dir.mkdir()
    (db_dir / 'api.py').write_text(
        'def writer(context):\n    pass\n'
        'def lease_get(context, ident, session=None):\n    pass\n'
        'def lock_pool(session, pool_id):\n    pass\n'
        'def _private(session):\n    pass\n')
    helpers = session_helpers({'composable.db.api': str(db_dir / 'api.py'),
                               'composable.other': str(db_dir / 'api.py')})
    assert helpers == {'composable.db.api': {'writer', 'lock_pool'}}
    path = tmp_path / 'm.py'
    path.write_text('from composable.db import api as db_api\n'
                    'from composable.db.api import writer\n'
                    'import composable.db.api\n'
                    'def f(context, s):\n'
                    '    db_api.lease_get(context, "x")\n'
                    '    with db_api.writer(context) as session:\n'
                    '        db_api.lock_pool(session, 1)\n'
                    '        db_api.lease_get(context, "x", session=s)\n'
                    '    composable.db.api.writer(context)\n'
                    '    other.writer(context)\n')
    assert session_helper_uses('composable.conductor.x', str(path),
                               helpers) == [
        (2, 'composable.db.api.writer'),
        (6, 'db_api.writer'), (7, 'db_api.lock_pool'),
        (8, 'db_api.lease_get(session=...)'),
        (9, 'composable.db.api.writer')]


def test_only_the_database_layer_opens_or_shares_a_transaction():
    modules = _modules()
    helpers = session_helpers(modules)
    # The finder knows the doors (the check looks).
    assert {'writer', 'reader', 'get_engine'} <= helpers['composable.db.api']
    assert {'create_in', 'release_unbound_ident_in'} <= helpers[
        'composable.db.allocation']
    wrong = {}
    for module, path in sorted(modules.items()):
        if not _outside(module, DB_LAYER):
            continue
        found = session_helper_uses(module, path, helpers)
        if found:
            wrong[module] = found
    assert wrong == {}


# Below the privileged modules: leaves of the standard library only.
PRIVSEP_MAY_IMPORT = ('composable.privsep', 'composable.conf',
                      'composable.common.locator')


def test_privsep_modules_are_leaves():
    graph = import_graph()
    privsep = sorted(m for m in graph if m.startswith('composable.privsep'))
    assert 'composable.privsep.memory' in privsep
    wrong = {m: sorted(n for n in graph[m]
                       if _outside(n, PRIVSEP_MAY_IMPORT))
             for m in privsep}
    assert {m: up for m, up in wrong.items() if up} == {}
    # composable.conf is allowed there only because it is a leaf too.
    conf_up = {m: sorted(n for n in graph[m]
                         if _outside(n, ('composable.conf',)))
               for m in graph if m.startswith('composable.conf')}
    assert {m: up for m, up in conf_up.items() if up} == {}
    # And so is composable.common.locator: it imports nothing of
    # composable (the package composable.common holds nothing either).
    assert 'composable.privsep.pci' in privsep
    assert 'composable.common.locator' in graph['composable.privsep.pci']
    assert graph['composable.common.locator'] == set()
    assert graph['composable.common'] == set()


def test_the_privsep_modules_load_without_the_rest_of_composable():
    # What the privsep daemon imports is what it runs as root: nothing
    # else of the service comes with it.
    import subprocess
    code = ('import sys\n'
            'import composable.privsep.memory, composable.privsep.pci\n'
            'import composable.privsep.fabric, composable.privsep.compute\n'
            'print("\\n".join(sorted(m for m in sys.modules\n'
            '      if m.startswith("composable"))))\n')
    out = subprocess.run([sys.executable, '-c', code], check=True,
                         capture_output=True, text=True, cwd=ROOT,
                         timeout=300).stdout.split()
    assert [m for m in out
            if _outside(m, PRIVSEP_MAY_IMPORT)
            and m not in ('composable', 'composable.common')] == []


# The compute agent, bottom up: the pieces (compute_node.*, memory_node)
# know nothing of who drives them; the libvirt hook server uses the
# pieces; the RPC endpoints use the pieces and are handed the hook
# server; the manager builds them all. Nothing points back up, so no
# two of them hold each other.
_AGENT_LAYERS = (
    ('composable.agent.compute_node', 'composable.agent.memory_node'),
    ('composable.agent.hook_server',),
    ('composable.agent.endpoints',),
    ('composable.agent.manager',),
)


def _agent_layer(module):
    for level, members in enumerate(_AGENT_LAYERS):
        if not _outside(module, members):
            return level
    return None


def test_the_agent_pieces_do_not_import_what_drives_them():
    graph = import_graph()
    assert 'composable.agent.compute_node.parts' in graph
    up = {}
    for module, imported in graph.items():
        level = _agent_layer(module)
        if level is None:
            continue
        wrong = sorted(n for n in imported
                       if (_agent_layer(n) or 0) > level)
        if wrong:
            up[module] = wrong
    assert up == {}


def private_uses(path):
    """``name._private`` reached through anything but self or cls, and
    ``from x import _private``, in the source at ``path``: line and
    text of each."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name = node.attr
            if not name.startswith('_') or name.startswith('__'):
                continue
            if isinstance(node.value, ast.Name) and \
                    node.value.id in ('self', 'cls'):
                continue
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom):
            found.extend((node.lineno, alias.name) for alias in node.names
                         if alias.name.startswith('_') and
                         not alias.name.startswith('__'))
    return found


def test_the_private_use_finder_finds_them(tmp_path):
    path = tmp_path / 'm.py'
    path.write_text('from x import _y\n'
                    'def f(attacher):\n'
                    '    self._ok = attacher._domain("i")\n'
                    '    return attacher.domain("i").__class__\n')
    assert private_uses(str(path)) == [(1, '_y'), (3, 'attacher._domain')]


def test_the_agent_uses_only_public_names_of_other_objects():
    # The hook server called the guest attacher's _domain and
    # _undefine_secret: its public domain() and remove_secret() are the
    # names to use, in every module of the agent.
    wrong = {}
    for module, path in _modules(os.path.join(PACKAGE_DIR,
                                              'agent')).items():
        found = private_uses(path)
        if found:
            wrong[module] = found
    assert 'composable.agent.hook_server' in _modules(
        os.path.join(PACKAGE_DIR, 'agent'))
    assert wrong == {}
