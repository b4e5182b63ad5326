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

"""The surface matrix: how each operation and request field of the API
is expressed on the other surfaces: the ``openstack composable`` commands
(CLI), the Horizon panels and Heat's resource types.

The operations and fields come from composable/api/openapi.yaml (the
API at its latest microversion): every query parameter and every field of
a request body, the fields of a nested object with declared properties
one by one (``elastic.min_mb``). :data:`SURFACES` says, for each operation,
which command, form (or view, table action) and Heat resource expresses
it and, where a field's name there is not the API's own, under which
name. What no surface expresses is listed, with the reason, in
composable/api/surface-exceptions.yaml.

:func:`problems` checks the mapping against the surfaces themselves:

* CLI: the command's class is found through the ``openstack.composable.v1``
  entry points of setup.cfg and its argparse parser is built; each field
  must be one of its options (``--memory``) or positionals (``<name>``).
* Horizon: the forms, views and table actions are read with :mod:`ast`
  (Django and Horizon need not be importable where this runs); each field
  must be a field the class (or a base class) declares, or a key of its
  ``filter_choices``.
* Heat: the resource type is found through ``resource_mapping()`` of the
  modules of composable/heat and its ``properties_schema`` and
  ``attributes_schema`` are read with :mod:`ast` (heat-engine's environment
  holds Heat; tests/heat checks that this reading is the one Heat makes);
  a field must be a property (nested: ``elastic.min_mb``), one of an
  update operation a property that can be updated.

``python -m composable.api.surfaces`` prints the table the documentation
includes (doc/source/user/surfaces.inc); a unit test keeps it current.
"""

import argparse
import ast
import collections
import configparser
import importlib
import os
import sys
from unittest import mock

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
DOCUMENT = os.path.join(ROOT, 'composable', 'api', 'openapi.yaml')
EXCEPTIONS = os.path.join(ROOT, 'composable', 'api',
                          'surface-exceptions.yaml')
SETUP_CFG = os.path.join(ROOT, 'setup.cfg')
HEAT_PACKAGE = 'composable.heat'

SURFACE_NAMES = ('cli', 'horizon', 'heat')
SURFACE_TITLES = {'cli': 'CLI', 'horizon': 'Horizon', 'heat': 'Heat'}

# Parameters that are not request fields: the microversion header and the
# path's identifiers.
_NOT_FIELDS_IN = ('header', 'path', 'cookie')

Cli = collections.namedtuple('Cli', 'command fields')
Horizon = collections.namedtuple('Horizon', 'target fields')
Heat = collections.namedtuple('Heat', 'resource action fields')

# Heat actions: how the resource carries out an operation. ``create``:
# its fields are properties; ``update``: properties that can be updated
# in place; ``attributes``: what the operation shows, as attributes;
# ``delete``: deleting the resource.
HEAT_ACTIONS = ('create', 'update', 'attributes', 'delete')


def _cli(command, **fields):
    return Cli(command, fields)


def _horizon(target, **fields):
    return Horizon(target, fields)


def _heat(resource, action, **fields):
    return Heat(resource, action, fields)


_CONTENT = 'composable.dashboard.content.'
_ADMIN = _CONTENT + 'admin.'
_LEASES = _CONTENT + 'leases.'
_LEASE = 'OS::Composable::Lease'
_LIST = dict(limit='--limit', marker='--marker', sort_key='--sort-key',
             sort_dir='--sort-dir')

# For each operation, the surfaces that express it. A field not named in
# an entry goes by its own name there: ``--device-kind`` (CLI option),
# ``device_kind`` (form field, filter key or Heat property). A field
# named None is expressed by the command, form or resource itself.
SURFACES = {
    # -- fabrics -------------------------------------------------------
    'listFabrics': {
        'cli': _cli('fabric list', **_LIST),
        'horizon': _horizon(_ADMIN + 'fabrics.views:IndexView'),
    },
    'createFabric': {
        'cli': _cli('fabric create', name='<name>',
                    driver_info='--driver-info'),
        'horizon': _horizon(_ADMIN + 'fabrics.views:CreateFabricForm'),
    },
    'showFabric': {
        'cli': _cli('fabric show'),
        'horizon': _horizon(_ADMIN + 'fabrics.views:UpdateView'),
    },
    'updateFabric': {
        'cli': _cli('fabric set', driver_info='--driver-info'),
        'horizon': _horizon(_ADMIN + 'fabrics.views:UpdateFabricForm'),
    },
    'deleteFabric': {
        'cli': _cli('fabric delete'),
        'horizon': _horizon(_ADMIN + 'base:DeleteAction'),
    },
    # -- hosts ---------------------------------------------------------
    'listHosts': {
        'cli': _cli('host list', **_LIST),
        'horizon': _horizon(_ADMIN + 'hosts.views:IndexView'),
    },
    'createHost': {
        'cli': _cli('host create', name='<name>', properties='--property'),
        'horizon': _horizon(_ADMIN + 'hosts.views:CreateHostForm'),
    },
    'showHost': {
        'cli': _cli('host show'),
        'horizon': _horizon(_ADMIN + 'hosts.views:UpdateView'),
    },
    'updateHost': {
        'cli': _cli('host set', properties='--property'),
        'horizon': _horizon(_ADMIN + 'hosts.views:UpdateHostForm'),
    },
    'deleteHost': {
        'cli': _cli('host delete'),
        'horizon': _horizon(_ADMIN + 'base:DeleteAction'),
    },
    # -- pools ---------------------------------------------------------
    'listPools': {
        'cli': _cli('pool list', **_LIST),
        'horizon': _horizon(_ADMIN + 'pools.views:IndexView'),
    },
    'createPool': {
        'cli': _cli('pool create', name='<name>', traits='--trait',
                    **{'sriov.host': '--sriov-host',
                       'sriov.pf_address': '--sriov-pf',
                       'sriov.vf_count': '--sriov-vfs',
                       'sriov.vf_mode': '--sriov-vf-mode',
                       'sriov.vendor_id': '--sriov-vendor-id',
                       'sriov.product_id': '--sriov-product-id'}),
        'horizon': _horizon(_ADMIN + 'pools.views:CreatePoolForm',
                            **{'sriov.host': 'sriov_host',
                               'sriov.pf_address': 'sriov_pf_address',
                               'sriov.vf_count': 'sriov_vf_count',
                               'sriov.vf_mode': 'sriov_vf_mode',
                               'sriov.vendor_id': 'sriov_vendor_id',
                               'sriov.product_id': 'sriov_product_id'}),
    },
    'showPool': {
        'cli': _cli('pool show'),
        'horizon': _horizon(_ADMIN + 'pools.views:UpdateView'),
    },
    'updatePool': {
        'cli': _cli('pool set', traits='--trait'),
        'horizon': _horizon(_ADMIN + 'pools.views:UpdatePoolForm'),
    },
    'deletePool': {
        'cli': _cli('pool delete'),
        'horizon': _horizon(_ADMIN + 'base:DeleteAction'),
    },
    # -- memory nodes --------------------------------------------------
    'listMemoryNodes': {
        'cli': _cli('memory node list', **_LIST),
        'horizon': _horizon(_ADMIN + 'memory_nodes.views:IndexView'),
    },
    'createMemoryNode': {
        'cli': _cli('memory node create', name='<name>',
                    capacity_mb='--capacity', reserved_mb='--reserved',
                    enabled='--disable'),
        'horizon': _horizon(_ADMIN + 'memory_nodes.views:'
                            'CreateMemoryNodeForm'),
    },
    'showMemoryNode': {
        'cli': _cli('memory node show'),
        'horizon': _horizon(_ADMIN + 'memory_nodes.views:UpdateView'),
    },
    'updateMemoryNode': {
        'cli': _cli('memory node set', capacity_mb='--capacity',
                    reserved_mb='--reserved', enabled='--enable'),
        'horizon': _horizon(_ADMIN + 'memory_nodes.views:'
                            'UpdateMemoryNodeForm'),
    },
    'deleteMemoryNode': {
        'cli': _cli('memory node delete'),
        'horizon': _horizon(_ADMIN + 'base:DeleteAction'),
    },
    # -- devices -------------------------------------------------------
    'listDevices': {
        'cli': _cli('device list', **_LIST),
        'horizon': _horizon(_ADMIN + 'devices.views:IndexView'),
    },
    'createDevice': {
        'cli': _cli('device create', traits='--trait'),
        'horizon': _horizon(_ADMIN + 'devices.views:CreateDeviceForm'),
    },
    'showDevice': {
        'cli': _cli('device show'),
        'horizon': _horizon(_ADMIN + 'devices.views:UpdateView'),
    },
    'updateDevice': {
        'cli': _cli('device set', traits='--trait'),
        'horizon': _horizon(_ADMIN + 'devices.views:UpdateDeviceForm'),
    },
    'deleteDevice': {
        'cli': _cli('device delete'),
        'horizon': _horizon(_ADMIN + 'base:DeleteAction'),
    },
    # -- leases --------------------------------------------------------
    'listLeases': {
        'cli': _cli('lease list', project_id='--project',
                    instance_uuid='--server', **_LIST),
        'horizon': _horizon(_LEASES + 'tables:LeaseFilterAction'),
    },
    'createLease': {
        'cli': _cli('lease create', name='<name>', memory_mb='--memory',
                    device_model='--gpu-model', device_traits='--trait',
                    device_uuids='--device', pools='--pool',
                    start_at='--start', end_at='--end',
                    **{'elastic.min_mb': '--elastic-min',
                       'elastic.max_mb': '--elastic-max',
                       'elastic.observation_window': '--observation-window',
                       'elastic.prediction_window': '--prediction-window',
                       'elastic.headroom': '--headroom'}),
        'horizon': _horizon(_LEASES + 'forms:CreateLeaseForm',
                            memory_mb='memory', pools='pool',
                            **{'elastic.min_mb': 'elastic_min',
                               'elastic.max_mb': 'elastic_max',
                               'elastic.observation_window':
                               'observation_window',
                               'elastic.prediction_window':
                               'prediction_window',
                               'elastic.headroom': 'headroom'}),
        'heat': _heat(_LEASE, 'create', memory_mb='memory',
                      device_model='gpu_model', start_at='start',
                      end_at='end'),
    },
    'showLease': {
        'cli': _cli('lease show'),
        'horizon': _horizon(_LEASES + 'views:DetailView'),
        'heat': _heat(_LEASE, 'attributes'),
    },
    'updateLease': {
        'cli': _cli('lease set', end_at='--end'),
        'horizon': _horizon(_LEASES + 'forms:ExtendLeaseForm'),
        'heat': _heat(_LEASE, 'update', end_at='end'),
    },
    'deleteLease': {
        'cli': _cli('lease delete'),
        'horizon': _horizon(_LEASES + 'tables:DeleteLease'),
        'heat': _heat(_LEASE, 'delete'),
    },
    'bindLease': {
        'cli': _cli('lease bind'),
        # An administrator's form (it lists the inventory's hosts);
        # project members bind to their servers with BindLeaseForm.
        'horizon': _horizon(_LEASES + 'forms:BindHostLeaseForm'),
        # Bound when the resource is created with a server or host, and
        # bound anew when they change.
        'heat': _heat(_LEASE, 'create'),
    },
    'unbindLease': {
        'cli': _cli('lease unbind'),
        'horizon': _horizon(_LEASES + 'tables:UnbindLease'),
        # Dropping the server (or host) property unbinds the lease.
        'heat': _heat(_LEASE, 'update'),
    },
    'listLeaseActions': {
        'cli': _cli('lease action list'),
        'horizon': _horizon(_LEASES + 'tabs:ActionLogTab'),
    },
    'showLeaseUsage': {
        'cli': _cli('lease usage show'),
        'horizon': _horizon(_LEASES + 'tabs:UsageTab'),
    },
}

# What an operation's Heat entry needs beyond its fields to carry it out:
# properties ("update:" those that can be updated in place) and
# attributes ("attr:").
HEAT_NEEDS = {
    'bindLease': ('update:server', 'update:host'),
    'unbindLease': ('update:server', 'update:host'),
    'showLease': ('attr:status', 'attr:fault', 'attr:host'),
}


# -- the API's side ----------------------------------------------------------

Operation = collections.namedtuple('Operation',
                                   'operation_id method path fields')


def load_document(path=DOCUMENT):
    with open(path) as f:
        return yaml.safe_load(f)


def _resolve(document, node):
    while isinstance(node, dict) and '$ref' in node:
        parts = node['$ref'].lstrip('#/').split('/')
        node = document
        for part in parts:
            node = node[part]
    return node


def _object_fields(document, schema, prefix=''):
    schema = _resolve(document, schema)
    fields = []
    for name, sub in (schema.get('properties') or {}).items():
        sub = _resolve(document, sub)
        for part in sub.get('allOf', ()):
            sub = dict(sub, **_resolve(document, part))
        if sub.get('type') == 'object' and sub.get('properties'):
            fields.extend(_object_fields(document, sub,
                                         prefix + name + '.'))
        else:
            fields.append(prefix + name)
    return fields


def operations(document):
    """Every operation of the document with its request fields: query
    parameters, then the body's fields."""
    result = []
    for path, item in document['paths'].items():
        for method, op in item.items():
            if method not in ('get', 'put', 'post', 'patch', 'delete'):
                continue
            fields = []
            for param in op.get('parameters', ()):
                param = _resolve(document, param)
                if param['in'] not in _NOT_FIELDS_IN:
                    fields.append(param['name'])
            body = op.get('requestBody')
            if body:
                schema = body['content']['application/json']['schema']
                fields.extend(_object_fields(document, schema))
            result.append(Operation(op['operationId'], method.upper(), path,
                                    fields))
    return result


# -- exceptions --------------------------------------------------------------

Exception_ = collections.namedtuple('Exception_',
                                    'key surfaces operations fields reason')


def load_exceptions(path=EXCEPTIONS):
    with open(path) as f:
        entries = yaml.safe_load(f) or []
    result = []
    for entry in entries:
        surfaces = entry['surfaces']
        if surfaces == '*':
            surfaces = SURFACE_NAMES
        result.append(Exception_(entry['key'], tuple(surfaces),
                                 entry['operations'],
                                 entry.get('fields'), entry['reason']))
    return result


def _excepted(exceptions, surface, operation_id, field=None):
    """The exception covering ``field`` of the operation on ``surface``
    (the whole operation when field is None), or None."""
    for exc in exceptions:
        if surface not in exc.surfaces:
            continue
        if exc.operations != '*' and operation_id not in exc.operations:
            continue
        fields = exc.fields
        if isinstance(fields, dict):
            if operation_id not in fields:
                continue
            fields = fields[operation_id]
        if fields is None or (field is not None and field in fields):
            return exc
    return None


# -- the surfaces' side ------------------------------------------------------

def _entry_points():
    config = configparser.ConfigParser()
    config.read(SETUP_CFG)
    points = {}
    for line in config['entry_points']['openstack.composable.v1'].split(
            '\n'):
        if '=' in line:
            name, target = (part.strip() for part in line.split('=', 1))
            points[name] = target
    return points


def _import(target):
    module, name = target.split(':')
    return getattr(importlib.import_module(module), name)


def cli_arguments(command):
    """The options and positionals (``<dest>``) of ``openstack composable
    <command>``, from its parser; None when there is no such command."""
    target = _entry_points().get('composable_' + command.replace(' ', '_'))
    if target is None:
        return None
    cls = _import(target)
    parser = cls(mock.Mock(), argparse.Namespace()).get_parser(
        'openstack composable ' + command)
    names = set()
    for action in parser._actions:
        if action.option_strings:
            names.update(action.option_strings)
        else:
            names.add('<%s>' % action.dest)
    return names


def _module_path(module):
    return os.path.join(ROOT, *module.split('.')) + '.py'


def _parse_module(module):
    with open(_module_path(module)) as f:
        return ast.parse(f.read())


def _classes(tree):
    return {node.name: node for node in tree.body
            if isinstance(node, ast.ClassDef)}


def _imported_modules(tree):
    """Local names of the modules a module imports from composable."""
    names = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and \
                node.module.startswith('composable'):
            for alias in node.names:
                names[alias.asname or alias.name] = '%s.%s' % (
                    node.module, alias.name)
    return names


def _find_class(module, name):
    """(module, ClassDef) of ``name`` in ``module``, or None."""
    tree = _parse_module(module)
    cls = _classes(tree).get(name)
    return None if cls is None else (module, cls)


def horizon_names(target):
    """What a Horizon class offers: the names assigned in its body and its
    bases' (the fields of a form, the columns of a table) and the keys of
    its ``filter_choices``; None when there is no such class."""
    module, name = target.split(':')
    found = _find_class(module, name)
    if found is None:
        return None
    names = set()
    todo = [found]
    while todo:
        module, cls = todo.pop()
        for node in cls.body:
            if isinstance(node, ast.Assign):
                for tgt in node.targets:
                    if isinstance(tgt, ast.Name):
                        names.add(tgt.id)
                if any(isinstance(t, ast.Name) and t.id == 'filter_choices'
                       for t in node.targets):
                    for choice in node.value.elts:
                        names.add(ast.literal_eval(choice.elts[0]))
        imported = _imported_modules(_parse_module(module))
        for base in cls.bases:
            if isinstance(base, ast.Name):
                parent = _find_class(module, base.id)
            elif (isinstance(base, ast.Attribute) and
                  isinstance(base.value, ast.Name) and
                  base.value.id in imported):
                parent = _find_class(imported[base.value.id], base.attr)
            else:
                parent = None
            if parent is not None:
                todo.append(parent)
    return names


HeatSchema = collections.namedtuple('HeatSchema', 'properties attributes')


def _heat_modules():
    directory = os.path.join(ROOT, *HEAT_PACKAGE.split('.'))
    return ['%s.%s' % (HEAT_PACKAGE, name[:-3])
            for name in sorted(os.listdir(directory))
            if name.endswith('.py') and name != '__init__.py']


def _heat_constants(cls):
    """The class's string constants: NAME = 'name' and the tuples
    (A, B) = ('a', 'b')."""
    constants = {}
    for node in cls.body:
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            value = node.value
            if isinstance(target, ast.Name) and isinstance(
                    value, ast.Constant) and isinstance(value.value, str):
                constants[target.id] = value.value
            elif isinstance(target, ast.Tuple) and isinstance(value,
                                                              ast.Tuple):
                for name, const in zip(target.elts, value.elts):
                    if isinstance(name, ast.Name) and isinstance(
                            const, ast.Constant):
                        constants[name.id] = const.value
    return constants


def _schema_entries(node, constants, prefix, into):
    """Read a dict of properties.Schema(...) into {dotted name:
    update_allowed}."""
    for key, value in zip(node.keys, node.values):
        if isinstance(key, ast.Name):
            name = constants[key.id]
        elif isinstance(key, ast.Attribute):
            name = constants[key.attr]
        else:
            name = ast.literal_eval(key)
        update = False
        nested = None
        if isinstance(value, ast.Call):
            for kw in value.keywords:
                if kw.arg == 'update_allowed':
                    update = bool(ast.literal_eval(kw.value))
                if kw.arg == 'schema' and isinstance(kw.value, ast.Dict):
                    nested = kw.value
        into[prefix + name] = update
        if nested is not None:
            _schema_entries(nested, constants, prefix + name + '.', into)


def heat_schema(resource_type):
    """The properties ({dotted name: update_allowed}) and attributes of a
    Heat resource type of composable/heat; None when none is mapped to
    that name."""
    for module in _heat_modules():
        tree = _parse_module(module)
        classes = _classes(tree)
        for node in tree.body:
            if not (isinstance(node, ast.FunctionDef) and
                    node.name == 'resource_mapping'):
                continue
            for ret in ast.walk(node):
                if not (isinstance(ret, ast.Return) and
                        isinstance(ret.value, ast.Dict)):
                    continue
                for key, value in zip(ret.value.keys, ret.value.values):
                    if ast.literal_eval(key) != resource_type:
                        continue
                    cls = classes[value.id]
                    constants = _heat_constants(cls)
                    props, attrs = {}, {}
                    for item in cls.body:
                        if not isinstance(item, ast.Assign):
                            continue
                        target = item.targets[0]
                        if not isinstance(target, ast.Name):
                            continue
                        if target.id == 'properties_schema':
                            _schema_entries(item.value, constants, '', props)
                        elif target.id == 'attributes_schema':
                            _schema_entries(item.value, constants, '', attrs)
                    return HeatSchema(props, set(attrs))
    return None


# -- the matrix --------------------------------------------------------------

Cell = collections.namedtuple('Cell', 'text exception')


def _alias(surface, entry, field):
    if field in entry.fields:
        return entry.fields[field]
    if surface == 'cli':
        return '--' + field.replace('_', '-').replace('.', '-')
    return field


class _Surfaces(object):
    """The surfaces, each read once."""

    def __init__(self):
        self._cli = {}
        self._horizon = {}
        self._heat = {}

    def cli(self, command):
        if command not in self._cli:
            self._cli[command] = cli_arguments(command)
        return self._cli[command]

    def horizon(self, target):
        if target not in self._horizon:
            self._horizon[target] = horizon_names(target)
        return self._horizon[target]

    def heat(self, resource):
        if resource not in self._heat:
            self._heat[resource] = heat_schema(resource)
        return self._heat[resource]


def _check_target(surfaces, surface, entry):
    """What the surface offers for the entry, or an error string."""
    if surface == 'cli':
        offered = surfaces.cli(entry.command)
        if offered is None:
            return None, ('no command "openstack composable %s"'
                          % entry.command)
    elif surface == 'horizon':
        offered = surfaces.horizon(entry.target)
        if offered is None:
            return None, 'no class %s' % entry.target
    else:
        offered = surfaces.heat(entry.resource)
        if offered is None:
            return None, 'no Heat resource type %s' % entry.resource
        if entry.action not in HEAT_ACTIONS:
            return None, 'unknown Heat action %s' % entry.action
    return offered, None


def _heat_has(offered, action, name):
    if name.startswith('attr:'):
        return name[len('attr:'):] in offered.attributes
    if name.startswith('update:'):
        action, name = 'update', name[len('update:'):]
    if name not in offered.properties:
        return False
    return action != 'update' or offered.properties[name]


def _target_text(surface, entry):
    if surface == 'cli':
        return entry.command
    if surface == 'horizon':
        return entry.target.replace(_CONTENT, '').replace(':', '.')
    return '%s (%s)' % (entry.resource, entry.action)


def matrix(document=None, exceptions=None):
    """(rows, problems): a row per operation and per field, with a Cell for
    each surface; the problems are what no surface and no exception
    covers, and mappings that name what the surfaces do not have."""
    document = document or load_document()
    if exceptions is None:
        exceptions = load_exceptions()
    surfaces = _Surfaces()
    rows = []
    problems = []
    ops = operations(document)
    known = {op.operation_id for op in ops}
    for op_id in sorted(set(SURFACES) - known):
        problems.append('%s: mapped in SURFACES but not in the API' % op_id)
    for op in ops:
        mapping = SURFACES.get(op.operation_id, {})
        op_cells = {}
        field_cells = {field: {} for field in op.fields}
        for surface in SURFACE_NAMES:
            entry = mapping.get(surface)
            whole = _excepted(exceptions, surface, op.operation_id)
            if entry is None:
                if whole is None:
                    problems.append(
                        '%s: no %s surface and no exception' % (
                            op.operation_id, SURFACE_TITLES[surface]))
                    op_cells[surface] = Cell('MISSING', None)
                else:
                    op_cells[surface] = Cell('', whole)
                for field in op.fields:
                    field_cells[field][surface] = op_cells[surface]
                continue
            if whole is not None:
                problems.append('%s: %s has both a surface and the '
                                'exception %s' % (op.operation_id,
                                                  surface, whole.key))
            offered, error = _check_target(surfaces, surface, entry)
            if error:
                problems.append('%s (%s): %s' % (op.operation_id, surface,
                                                 error))
                op_cells[surface] = Cell('MISSING', None)
                continue
            op_cells[surface] = Cell(_target_text(surface, entry), None)
            needs = HEAT_NEEDS.get(op.operation_id, ()) if \
                surface == 'heat' else ()
            for name in needs:
                if not _heat_has(offered, entry.action, name):
                    problems.append('%s (heat): %s has no %s' % (
                        op.operation_id, entry.resource, name))
            for field in op.fields:
                exc = _excepted(exceptions, surface, op.operation_id, field)
                alias = _alias(surface, entry, field)
                if surface == 'heat':
                    present = _heat_has(offered, entry.action, alias)
                else:
                    present = alias in offered
                if present and exc is not None:
                    problems.append(
                        '%s %s (%s): expressed as %s but listed in the '
                        'exception %s' % (op.operation_id, field, surface,
                                          alias, exc.key))
                if present:
                    field_cells[field][surface] = Cell(alias, None)
                elif exc is not None:
                    field_cells[field][surface] = Cell('', exc)
                else:
                    what = {'cli': 'option', 'horizon': 'field',
                            'heat': 'property'}[surface]
                    if surface == 'heat' and entry.action == 'update':
                        what = 'property that can be updated'
                    problems.append(
                        '%s %s: no %s %s in %s, and no exception' % (
                            op.operation_id, field, SURFACE_TITLES[surface],
                            what, _target_text(surface, entry)) +
                        ('' if alias == field else ' (looked for %s)'
                         % alias))
                    field_cells[field][surface] = Cell('MISSING', None)
        rows.append((op, None, op_cells))
        for field in op.fields:
            rows.append((op, field, field_cells[field]))
    for exc in exceptions:
        for surface in exc.surfaces:
            if surface not in SURFACE_NAMES:
                problems.append('exception %s: unknown surface %s'
                                % (exc.key, surface))
        named = [] if exc.operations == '*' else list(exc.operations)
        if isinstance(exc.fields, dict):
            named += list(exc.fields)
        for op_id in named:
            if op_id not in known:
                problems.append('exception %s: no operation %s'
                                % (exc.key, op_id))
    return rows, problems


def problems(document=None, exceptions=None):
    return matrix(document, exceptions)[1]


def _cell_text(cell, notes):
    if cell.exception is not None:
        key = cell.exception.key
        if key not in notes:
            notes.append(key)
        return '— [%s]_' % key
    if cell.text == 'MISSING':
        return '**missing**'
    return '``%s``' % cell.text


def render_rst(document=None, exceptions=None):
    """The matrix as an RST list-table, then the exceptions' reasons."""
    if exceptions is None:
        exceptions = load_exceptions()
    rows, _problems = matrix(document, exceptions)
    lines = [
        '.. This file is generated by "python -m composable.api.surfaces >',
        '   doc/source/user/surfaces.inc"; a unit test checks that it is',
        '   current.',
        '',
        '.. list-table::',
        '   :header-rows: 1',
        '   :class: surface-matrix',
        '',
        '   * - API',
    ]
    for surface in SURFACE_NAMES:
        lines.append('     - %s' % SURFACE_TITLES[surface])
    notes = []
    for op, field, cells in rows:
        if field is None:
            lines.append('   * - **%s** ``%s %s``' % (op.operation_id,
                                                      op.method, op.path))
        else:
            lines.append('   * - \u2003``%s``' % field)
        for surface in SURFACE_NAMES:
            lines.append('     - %s' % _cell_text(cells[surface], notes))
    lines.append('')
    by_key = {exc.key: exc for exc in exceptions}
    for key in notes:
        reason = ' '.join(by_key[key].reason.split())
        lines.append('.. [%s] %s' % (key, reason))
    return '\n'.join(lines) + '\n'


def main():
    sys.stdout.write(render_rst())
    return 0


if __name__ == '__main__':
    sys.exit(main())
