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

"""Every operation and request field of the API has a surface: the CLI,
Horizon and Heat express it, or composable/api/surface-exceptions.yaml
says why not.

The CLI's parsers are built from its command classes; Horizon's forms and
Heat's resource are read with ast (Django, Horizon and Heat are not in
this environment; tests/heat checks the Heat reading against Heat).
"""

import copy
import os

from composable.api import surfaces

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
INCLUDE = os.path.join(ROOT, 'doc', 'source', 'user', 'surfaces.inc')


def test_every_operation_and_field_has_a_surface_or_an_exception():
    assert surfaces.problems() == []


def test_documented_matrix_is_current():
    with open(INCLUDE) as f:
        written = f.read()
    assert written == surfaces.render_rst(), (
        'doc/source/user/surfaces.inc is out of date: run '
        '"python -m composable.api.surfaces > doc/source/user/surfaces.inc"')


def test_every_operation_is_a_row():
    document = surfaces.load_document()
    rows, _ = surfaces.matrix(document)
    ops = {op.operation_id for op, field, cells in rows if field is None}
    assert ops == {op.operation_id for op in surfaces.operations(document)}
    assert {'createLease', 'bindLease', 'createPool'} <= ops
    fields = {(op.operation_id, field) for op, field, cells in rows}
    assert ('createLease', 'elastic.headroom') in fields
    assert ('createPool', 'sriov.pf_address') in fields
    assert ('listLeases', 'instance_uuid') in fields


def test_a_new_api_field_without_a_surface_fails():
    document = copy.deepcopy(surfaces.load_document())
    schemas = document['components']['schemas']
    schemas['LeaseCreate']['properties']['frobnicate'] = {'type': 'integer'}
    found = surfaces.problems(document)
    for surface in ('CLI', 'Horizon', 'Heat'):
        assert any(p.startswith('createLease frobnicate: no %s ' % surface)
                   for p in found), (surface, found)
    assert len(found) == 3, found


def test_a_new_nested_field_and_query_parameter_fail():
    document = copy.deepcopy(surfaces.load_document())
    schemas = document['components']['schemas']
    schemas['PoolSriov']['properties']['mtu'] = {'type': 'integer'}
    document['paths']['/v1/hosts']['get']['parameters'].append(
        {'name': 'zone', 'in': 'query', 'schema': {'type': 'string'}})
    found = surfaces.problems(document)
    assert any(p.startswith('createPool sriov.mtu: no CLI option')
               for p in found), found
    assert any(p.startswith('listHosts zone: no CLI option')
               for p in found), found


def test_a_new_operation_without_a_surface_fails():
    document = copy.deepcopy(surfaces.load_document())
    document['paths']['/v1/leases/{lease_ident}/renew'] = {
        'post': {'operationId': 'renewLease', 'responses': {}}}
    found = surfaces.problems(document)
    assert 'renewLease: no CLI surface and no exception' in found
    assert 'renewLease: no Heat surface and no exception' in found


def test_an_exception_for_what_a_surface_expresses_fails():
    exceptions = surfaces.load_exceptions() + [surfaces.Exception_(
        'stale', ('cli',), ['createLease'], ['memory_mb'], 'stale')]
    found = surfaces.problems(exceptions=exceptions)
    assert found == ['createLease memory_mb (cli): expressed as --memory '
                     'but listed in the exception stale']


def test_a_mapping_to_what_a_surface_lacks_fails(monkeypatch):
    entry = surfaces.SURFACES['createLease']['cli']
    monkeypatch.setitem(
        surfaces.SURFACES['createLease'], 'cli',
        entry._replace(fields=dict(entry.fields, memory_mb='--ram')))
    monkeypatch.setitem(
        surfaces.SURFACES['updateLease'], 'heat',
        surfaces.Heat('OS::Composable::Lease', 'update', {'end_at': 'start'}))
    found = surfaces.problems()
    assert ('createLease memory_mb: no CLI option in lease create, and no '
            'exception (looked for --ram)') in found
    # start is a property, but a new start replaces the lease.
    assert any(p.startswith('updateLease end_at: no Heat property that '
                            'can be updated') for p in found), found


def test_cli_arguments_come_from_the_parser():
    names = surfaces.cli_arguments('lease create')
    assert {'<name>', '--memory', '--elastic-min', '--pool'} <= names
    assert '--sriov-pf' in surfaces.cli_arguments('pool create')
    assert surfaces.cli_arguments('lease frobnicate') is None


def test_horizon_fields_are_read_with_their_bases():
    names = surfaces.horizon_names(
        'composable.dashboard.content.admin.pools.views:CreatePoolForm')
    # Its own, its parent's in the module, base.InventoryForm's.
    assert {'kind', 'reserved', 'uuid'} <= names
    filters = surfaces.horizon_names(
        'composable.dashboard.content.leases.tables:LeaseFilterAction')
    assert {'name', 'status', 'pool'} <= filters
    assert surfaces.horizon_names(
        'composable.dashboard.content.leases.forms:NoSuchForm') is None


def test_heat_schema_is_read_from_the_resource():
    schema = surfaces.heat_schema('OS::Composable::Lease')
    assert schema.properties['end'] is True
    assert schema.properties['memory'] is False
    assert {'status', 'fault', 'host'} <= schema.attributes
    assert surfaces.heat_schema('OS::Composable::Nothing') is None
