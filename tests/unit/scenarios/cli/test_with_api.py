#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""The commands against the real composable API application.

The API is served in-process (wsgiref, a thread, 127.0.0.1:<free port>)
over a SQLite database in a temporary directory, with the ``fake://``
messaging transport and, once it exists, a conductor RPC server in the
same process. The commands run through ``openstackclient.shell.main``
exactly as ``openstack --os-auth-type none --os-endpoint URL composable
...`` would.
"""

import datetime
import importlib
import os
import shutil
import tempfile
import time

from oslo_messaging import conffixture
import pytest

from tests.unit.cli import fakes


def _import(name, attribute):
    """(the attribute, None) or (None, why it is not usable)."""
    try:
        module = importlib.import_module(name)
    except Exception as exc:
        return None, '%s cannot be imported: %s: %s' % (
            name, type(exc).__name__, exc)
    value = getattr(module, attribute, None)
    if value is None:
        return None, '%s.%s does not exist yet' % (name, attribute)
    return value, None


def _setup_app():
    return _import('composable.api.app', 'setup_app')[0]


def _conductor_manager():
    return _import('composable.conductor.manager', 'ConductorManager')[0]


_APP_MISSING = _import('composable.api.app', 'setup_app')[1]
_CONDUCTOR_MISSING = _import('composable.conductor.manager',
                             'ConductorManager')[1]
_AGENT_MISSING = _import('composable.agent.manager', 'AgentManager')[1]

pytestmark = pytest.mark.skipif(
    _APP_MISSING is not None,
    reason='no API application to test against: %s' % _APP_MISSING)

needs_conductor = pytest.mark.skipif(
    _CONDUCTOR_MISSING is not None,
    reason='lease commands need a conductor: %s' % _CONDUCTOR_MISSING)

needs_agents = pytest.mark.skipif(
    _AGENT_MISSING is not None,
    reason='binding leases needs agents: %s' % _AGENT_MISSING)


class Service(object):
    """The API (and the conductor when it exists) in this process."""

    def __init__(self):
        from composable.common import rpc
        from composable import conf
        from composable.db import api as db_api

        self.conf = conf.CONF
        self.rpc = rpc
        self.db_api = db_api
        self.tmp = tempfile.mkdtemp(prefix='composable-cli-')
        self.messaging = conffixture.ConfFixture(self.conf,
                                                 transport_url='fake:/')
        self.conductor = None
        self.server = None
        self.agents = []

    def start(self):
        conf = self.conf
        # No configuration file: defaults plus the overrides below.
        conf([], project='composable', default_config_files=[],
             default_config_dirs=[])
        self.messaging.setUp()
        conf.set_override('connection', 'sqlite:///%s' % os.path.join(
            self.tmp, 't.sqlite'), 'database')
        conf.set_override('auth_strategy', 'noauth')
        conf.set_override('host', 'cli-test-conductor')
        # Pages of one item: every list follows the API's next links.
        conf.set_override('default_limit', 1, 'api')
        conf.set_override('max_limit', 1, 'api')
        # A missing agent fails a bind quickly rather than in 2 minutes.
        conf.set_override('rpc_response_timeout_bind', 10)
        self.db_api.reset_facade()
        self.db_api.create_schema_for_tests()
        self.rpc.cleanup()
        self.rpc.init(conf)
        manager_class = _conductor_manager()
        if manager_class is not None:
            manager = _make_manager(manager_class, conf.host)
            self.conductor = self.rpc.get_server(
                self.rpc.CONDUCTOR_TOPIC, conf.host, [manager])
            self.conductor.start()
            self.manager = manager
        self.server = fakes.WSGIServer(_setup_app()('noauth')).start()
        self.url = self.server.url
        return self

    def start_agent(self, name, role):
        manager = _import('composable.agent.manager', 'AgentManager')[0]
        agent = self.rpc.get_server(self.rpc.AGENT_TOPIC, name,
                                    manager(name, [role]).endpoints)
        agent.start()
        self.agents.append(agent)

    def stop(self):
        if self.server is not None:
            self.server.stop()
        for agent in self.agents:
            agent.stop()
            agent.wait()
        if self.conductor is not None:
            self.conductor.stop()
            self.conductor.wait()
            stop = getattr(self.manager, 'stop', None) or getattr(
                self.manager, 'del_host', None)
            if stop is not None:
                try:
                    stop()
                except Exception:
                    pass
        self.rpc.cleanup()
        self.db_api.reset_facade()
        self.conf.clear_override('connection', 'database')
        self.conf.clear_override('default_limit', 'api')
        self.conf.clear_override('max_limit', 'api')
        for name in ('auth_strategy', 'host', 'rpc_response_timeout_bind'):
            self.conf.clear_override(name)
        self.messaging.cleanUp()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _admin_context():
    from composable.common import context
    return context.get_admin_context()


def _make_manager(manager_class, host):
    try:
        manager = manager_class(host)
    except TypeError:
        manager = manager_class()
    init_host = getattr(manager, 'init_host', None) or getattr(
        manager, 'start', None)
    if init_host is not None:
        init_host()
    return manager


@pytest.fixture(scope='module')
def service():
    svc = Service().start()
    try:
        yield svc
    finally:
        svc.stop()


def cli(service, *args):
    return fakes.run_json(service.url, *args)


def cli_fails(service, *args):
    code, out, err = fakes.run_openstack(service.url, *args)
    assert code != 0, out
    return err


@pytest.fixture(scope='module')
def inventory(service):
    """A fake fabric, a host, a memory pool with two nodes, a GPU pool
    with two GPUs."""
    fabric = cli(service, 'fabric', 'create', 'fab1', '--driver', 'fake',
                 '--driver-info', 'url=http://redfish.example',
                 '--driver-info', 'password=s3cret')
    host = cli(service, 'host', 'create', 'compute-1', '--fabric', 'fab1',
               '--initiator-iqn', 'iqn.2026-11.example:compute-1')
    mem = cli(service, 'pool', 'create', 'mem1', '--kind', 'memory',
              '--fabric', 'fab1', '--step-size', '1GiB')
    nodes = [cli(service, 'memory', 'node', 'create', 'mn%d' % i, '--pool',
                 'mem1', '--capacity', '8GiB', '--portal',
                 '192.0.2.%d:3260' % i) for i in (1, 2)]
    gpus = cli(service, 'pool', 'create', 'gpu1', '--kind', 'gpu',
               '--fabric', 'fab1')
    devices = [cli(service, 'device', 'create', '--pool', 'gpu1',
                   '--address', 'slot-%d' % i, '--name', 'g%d' % i,
                   '--model', 'A100', '--vendor-id', '10de',
                   '--product-id', '20b0') for i in (1, 2)]
    return {'fabric': fabric, 'host': host, 'memory_pool': mem,
            'nodes': nodes, 'gpu_pool': gpus, 'devices': devices}


def test_inventory_created(service, inventory):
    fabric = inventory['fabric']
    assert fabric['name'] == 'fab1'
    assert fabric['driver'] == 'fake'
    assert fabric['driver_info']['url'] == 'http://redfish.example'
    assert fabric['driver_info']['password'] == '***'
    assert inventory['host']['fabric_uuid'] == fabric['uuid']
    assert inventory['memory_pool']['resource_class'] == (
        'CUSTOM_COMPOSABLE_MEMORY_MB')
    assert inventory['memory_pool']['step_size'] == 1024
    assert inventory['nodes'][0]['capacity_mb'] == 8192
    assert inventory['gpu_pool']['resource_class'] == (
        'CUSTOM_COMPOSABLE_GPU')
    assert inventory['devices'][0]['kind'] == 'gpu'
    assert inventory['devices'][0]['state'] == 'available'


def test_pool_list_and_show(service, inventory):
    pools = {p['name']: p for p in cli(service, 'pool', 'list')}
    assert set(pools) >= {'mem1', 'gpu1'}
    assert list(pools['mem1']) == ['uuid', 'name', 'kind', 'resource_class',
                                   'total', 'reserved', 'used', 'free']
    assert pools['mem1']['total'] == 16384
    assert pools['mem1']['free'] == 16384
    assert pools['gpu1']['total'] == 2
    assert [p['name'] for p in cli(service, 'pool', 'list', '--kind',
                                   'gpu')] == ['gpu1']
    shown = cli(service, 'pool', 'show', 'gpu1')
    assert shown['uuid'] == inventory['gpu_pool']['uuid']
    assert 'links' not in shown
    long_list = cli(service, 'pool', 'list', '--long')
    assert 'traits' in long_list[0]


def test_list_pages_are_followed(service, inventory):
    # The API gives pages of one item: the client follows next links.
    nodes = cli(service, 'memory', 'node', 'list', '--pool', 'mem1')
    assert sorted(n['name'] for n in nodes) == ['mn1', 'mn2']
    one = cli(service, 'memory', 'node', 'list', '--limit', '1')
    assert len(one) == 1
    first = cli(service, 'device', 'list', '--limit', '1',
                '--sort-key', 'name')
    rest = cli(service, 'device', 'list', '--marker', first[0]['uuid'],
               '--sort-key', 'name')
    assert [d['name'] for d in first + rest] == ['g1', 'g2']


def test_show_missing_is_a_clear_error(service, inventory):
    err = cli_fails(service, 'pool', 'show', 'no-such-pool')
    assert 'no-such-pool' in err
    assert '(HTTP 404)' in err


def test_validation_error_is_shown(service, inventory):
    err = cli_fails(service, 'pool', 'create', 'bad', '--kind', 'pci',
                    '--fabric', 'fab1')
    assert '(HTTP 400)' in err


def test_set_commands(service, inventory):
    host = cli(service, 'host', 'set', 'compute-1', '--property', 'rack=r1')
    assert host['properties'] == {'rack': 'r1'}
    pool = cli(service, 'pool', 'set', 'gpu1', '--trait', 'CUSTOM_NVLINK',
               '--description', 'GPUs')
    assert pool['traits'] == ['CUSTOM_NVLINK']
    assert pool['description'] == 'GPUs'
    node = cli(service, 'memory', 'node', 'set', 'mn2', '--reserved',
               '1GiB')
    assert node['reserved_mb'] == 1024
    assert cli(service, 'pool', 'show', 'mem1')['total'] == 15360
    node = cli(service, 'memory', 'node', 'set', 'mn2', '--reserved', '0')
    assert node['reserved_mb'] == 0
    device = cli(service, 'device', 'set', 'g2', '--state', 'maintenance')
    assert device['state'] == 'maintenance'
    device = cli(service, 'device', 'set', 'g2', '--state', 'available')
    assert device['state'] == 'available'
    fabric = cli(service, 'fabric', 'set', 'fab1', '--description', 'rack',
                 '--driver-info', 'url=http://redfish2.example')
    assert fabric['description'] == 'rack'
    assert fabric['driver_info'] == {'url': 'http://redfish2.example',
                                     'password': '***'}
    # The secret read back masked was kept, not overwritten by the mask.
    stored = service.db_api.fabric_get(_admin_context(), 'fab1')
    assert stored.driver_info['password'] == 's3cret'


def test_delete_reports_failures(service, inventory):
    cli(service, 'fabric', 'create', 'spare', '--driver', 'fake')
    # fab1 is in use (409), spare goes, ghost does not exist (404).
    err = cli_fails(service, 'fabric', 'delete', 'fab1', 'spare', 'ghost')
    assert 'Failed to delete fabric fab1' in err
    assert 'Failed to delete fabric ghost' in err
    assert '2 of 3 fabrics failed to delete' in err
    names = [f['name'] for f in cli(service, 'fabric', 'list')]
    assert names == ['fab1']


@pytest.fixture(scope='module')
def agents(service, inventory):
    """composable-agent endpoints for the host and the memory nodes."""
    service.start_agent('compute-1', 'compute_node')
    for node in inventory['nodes']:
        service.start_agent(node['name'], 'memory_node')


def _wait_for_status(service, lease, statuses, timeout=30):
    deadline = time.time() + timeout
    while True:
        shown = cli(service, 'lease', 'show', lease)
        if shown['status'] in statuses or time.time() > deadline:
            return shown
        time.sleep(0.2)


@needs_conductor
@needs_agents
def test_lease_lifecycle(service, inventory, agents):
    lease = cli(service, 'lease', 'create', 'l1', '--memory', '2GiB',
                '--end', '2099-01-01T00:00:00+01:00')
    assert lease['memory_mb'] == 2048
    assert lease['end_at'] == '2098-12-31T23:00:00Z'
    lease = _wait_for_status(service, 'l1', ('reserved', 'alloc_failed'))
    assert lease['status'] == 'reserved', lease['fault']
    assert sum(e['size_mb'] for e in lease['extents']) == 2048
    assert cli(service, 'pool', 'show', 'mem1')['used'] == 2048

    listed = cli(service, 'lease', 'list')
    assert [item['name'] for item in listed] == ['l1']
    assert list(listed[0]) == ['uuid', 'name', 'status', 'memory_mb',
                               'device_count', 'device_kind', 'host',
                               'end_at']
    assert cli(service, 'lease', 'list', '--status', 'bound') == []

    lease = cli(service, 'lease', 'set', 'l1', '--description', 'd')
    assert lease['description'] == 'd'

    lease = cli(service, 'lease', 'bind', 'l1', '--host', 'compute-1')
    assert lease['status'] in ('binding', 'bound')
    lease = _wait_for_status(service, 'l1', ('bound', 'bind_failed'))
    assert lease['status'] == 'bound', lease['fault']
    assert lease['host'] == 'compute-1'

    lease = cli(service, 'lease', 'unbind', 'l1')
    lease = _wait_for_status(service, 'l1', ('reserved', 'error'))
    assert lease['status'] == 'reserved', lease['fault']

    actions = cli(service, 'lease', 'action', 'list', 'l1')
    assert [a['action'] for a in actions][:1] == ['create']
    assert {'bind', 'unbind'} <= {a['action'] for a in actions}

    code, out, err = fakes.run_openstack(service.url, 'lease', 'delete',
                                         'l1')
    assert code == 0, err
    lease = _wait_for_status(service, lease['uuid'], ('released',))
    assert lease['status'] == 'released'
    assert cli(service, 'lease', 'list') == []
    assert [item['uuid'] for item in cli(
        service, 'lease', 'list', '--status', 'released')] == [lease['uuid']]
    assert cli(service, 'pool', 'show', 'mem1')['used'] == 0


@needs_conductor
@needs_agents
def test_bind_to_a_server(service, inventory, agents):
    """lease bind takes --server with --host (the server on that host),
    as the API does; --server alone asks Nova where the server runs,
    which this service (no [nova]) refuses with the API's message."""
    server = '0c7d5a1e-5b0a-4c55-9d7e-3f1f9a1b2c3d'
    lease = cli(service, 'lease', 'create', 'for-server', '--memory',
                '1GiB')
    assert _wait_for_status(service, lease['uuid'], (
        'reserved', 'alloc_failed'))['status'] == 'reserved'
    lease = cli(service, 'lease', 'bind', 'for-server', '--server', server,
                '--host', 'compute-1')
    assert lease['status'] in ('binding', 'bound')
    lease = _wait_for_status(service, 'for-server', ('bound', 'bind_failed'))
    assert lease['status'] == 'bound', lease['fault']
    assert (lease['host'], lease['instance_uuid']) == ('compute-1', server)
    cli(service, 'lease', 'unbind', 'for-server')
    assert _wait_for_status(service, 'for-server', (
        'reserved', 'error'))['status'] == 'reserved'
    err = cli_fails(service, 'lease', 'bind', 'for-server', '--server',
                    server)
    assert '(HTTP 400)' in err and '[nova] configured' in err
    assert cli(service, 'lease', 'show', 'for-server')['status'] == \
        'reserved'
    code, out, err = fakes.run_openstack(service.url, 'lease', 'delete',
                                         'for-server')
    assert code == 0, err
    _wait_for_status(service, lease['uuid'], ('released',))


@needs_conductor
def test_gpu_lease_and_errors(service, inventory):
    lease = cli(service, 'lease', 'create', 'g', '--gpu', '1',
                '--gpu-model', 'A100')
    lease = _wait_for_status(service, lease['uuid'],
                             ('reserved', 'alloc_failed'))
    assert lease['status'] == 'reserved', lease['fault']
    assert lease['device_kind'] == 'gpu'
    assert len(lease['devices']) == 1

    # More than is free: created, but alloc_failed with a fault.
    big = cli(service, 'lease', 'create', 'big', '--gpu', '2')
    big = _wait_for_status(service, big['uuid'],
                           ('reserved', 'alloc_failed'))
    assert big['status'] == 'alloc_failed'
    assert big['fault']

    # A leased device cannot be leased again: 409, nothing created.
    taken = lease['devices'][0]['uuid']
    err = cli_fails(service, 'lease', 'create', 'again', '--device', taken)
    assert '(HTTP 409)' in err

    # Unknown host: 400 with the server's detail.
    err = cli_fails(service, 'lease', 'bind', lease['uuid'], '--host',
                    'no-such-host')
    assert 'no-such-host' in err

    # Delete: one unknown lease fails, the others go.
    err = cli_fails(service, 'lease', 'delete', lease['uuid'], 'ghost',
                    big['uuid'])
    assert 'Failed to delete lease ghost' in err
    assert '1 of 3 leases failed to delete' in err
    for uuid in (lease['uuid'], big['uuid']):
        assert _wait_for_status(service, uuid, ('released',))[
            'status'] == 'released'


@needs_conductor
@needs_agents
def test_elastic_lease_and_its_usage(service, inventory, agents):
    from composable.common import utils as common_utils
    from composable.conductor import rpcapi

    err = cli_fails(service, 'lease', 'create', 'half', '--memory', '1GiB',
                    '--elastic-min', '1GiB')
    assert 'needs both --elastic-min and --elastic-max' in err
    err = cli_fails(service, 'lease', 'create', 'wide', '--memory', '1GiB',
                    '--elastic-min', '2GiB', '--elastic-max', '4GiB')
    assert 'an elastic lease starts within [min_mb, max_mb]' in err
    assert '(HTTP 400)' in err

    lease = cli(service, 'lease', 'create', 'el', '--memory', '1GiB',
                '--elastic-min', '1GiB', '--elastic-max', '4GiB',
                '--observation-window', '120', '--headroom', '0.5')
    assert lease['elastic'] == {'min_mb': 1024, 'max_mb': 4096,
                                'observation_window': 120,
                                'prediction_window': 60, 'headroom': 0.5}
    assert cli(service, 'lease', 'show', 'el')['elastic'] == \
        lease['elastic']
    cli(service, 'lease', 'bind', 'el', '--host', 'compute-1')
    bound = _wait_for_status(service, 'el', ('bound', 'bind_failed'))
    assert bound['status'] == 'bound', bound['fault']

    assert cli(service, 'lease', 'usage', 'show', 'el') == []
    now = common_utils.utcnow()
    rpcapi.ConductorAPI().report_lease_usage(_admin_context(), 'compute-1', [
        {'lease_uuid': lease['uuid'], 'used_mb': used, 'size_mb': 1024,
         'taken_at': common_utils.isotime(now - datetime.timedelta(
             seconds=30 - 10 * i))}
        for i, used in enumerate((100, 200, 300))])
    deadline = time.time() + 30
    while len(cli(service, 'lease', 'usage', 'show', 'el')) < 3:
        assert time.time() < deadline
        time.sleep(0.2)
    usage = cli(service, 'lease', 'usage', 'show', 'el')
    assert [row['used_mb'] for row in usage] == [100, 200, 300]
    assert list(usage[0]) == ['taken_at', 'used_mb', 'size_mb']
    assert [row['used_mb'] for row in cli(
        service, 'lease', 'usage', 'show', 'el', '--limit', '2')] == [100,
                                                                      200]
    code, out, err = fakes.run_openstack(service.url, 'lease', 'delete',
                                         'el')
    assert code == 0, err
    # A released lease is found by its UUID only.
    assert _wait_for_status(service, lease['uuid'], ('released',))[
        'status'] == 'released'
