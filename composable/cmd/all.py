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

"""composable-all: the API, a conductor and the agents of every registered
node in one process, on SQLite and the in-process ``fake://`` message
transport, with no authentication (``noauth``) unless a configuration file
sets ``[DEFAULT]auth_strategy = keystone``, and a demo inventory.

For a first look and for demos: nothing in it touches hardware (the demo
fabric uses the "fake" driver and memory nodes the "noop" exporter, and both
say so in the log). Listens on 127.0.0.1:6590 by default ([api]host_ip,
[api]port).
"""

import errno
import os
import sys
import threading

from oslo_config import cfg
from oslo_log import log as logging
import oslo_messaging as messaging
from oslo_messaging import opts as messaging_opts
import yaml

from composable.agent import manager as agent_manager
from composable.common import context as composable_context
from composable.common import exception
from composable.common import resource_classes
from composable.common import rpc
from composable.common import service
from composable import conf
from composable.conductor import manager as conductor_manager
from composable.db import api as db_api
from composable.db import location as db_location
from composable import fabric as fabric_drivers
from composable import notifications

CONF = conf.CONF
LOG = logging.getLogger(__name__)

INVENTORY_NAME = 'demo-inventory.yaml'

_cli_opts = [
    cfg.StrOpt('inventory',
               help='YAML file of the inventory to register at start-up '
                    '(fabrics, hosts, pools, memory_nodes, devices). '
                    'Default: the demo inventory shipped with composable.'),
]


def find_inventory(path=None):
    """The inventory file: ``path``, else etc/composable next to the
    package (a source checkout), else under sys.prefix (an installed
    package's data files), else /etc/composable."""
    if path:
        if not os.path.exists(path):
            raise exception.Invalid(reason='inventory file %s does not '
                                           'exist' % path)
        return path
    package_dir = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    for candidate in (
            os.path.join(package_dir, 'etc', 'composable', INVENTORY_NAME),
            os.path.join(sys.prefix, 'etc', 'composable', INVENTORY_NAME),
            os.path.join('/etc', 'composable', INVENTORY_NAME)):
        if os.path.exists(candidate):
            return candidate
    return None


def _exists(getter, context, ident):
    try:
        return getter(context, ident)
    except exception.NotFound:
        return None


def load_inventory(context, path):
    """Register what ``path`` lists and is not registered yet (by name;
    devices by pool and address). Returns the number of objects created."""
    with open(path) as f:
        data = yaml.safe_load(f) or {}
    created = 0
    fabrics = {}
    for item in data.get('fabrics') or []:
        fabric = _exists(db_api.fabric_get, context, item['name'])
        if fabric is None:
            driver = fabric_drivers.get_driver(item['driver'])
            driver.validate_driver_info(item.get('driver_info') or {})
            fabric = db_api.fabric_create(context, {
                'name': item['name'], 'driver': item['driver'],
                'driver_info': item.get('driver_info') or {},
                'aggregate_uuid': item.get('aggregate_uuid'),
                'description': item.get('description')})
            created += 1
        fabrics[fabric.name] = fabric
    for item in data.get('hosts') or []:
        if _exists(db_api.host_get, context, item['name']) is None:
            fabric = fabrics.get(item['fabric']) or db_api.fabric_get(
                context, item['fabric'])
            db_api.host_create(context, {
                'name': item['name'], 'fabric_id': fabric.id,
                'initiator_iqn': item.get('initiator_iqn'),
                'partition_id': item.get('partition_id'),
                'properties': item.get('properties') or {}})
            created += 1
    pools = {}
    for item in data.get('pools') or []:
        pool = _exists(db_api.pool_get, context, item['name'])
        if pool is None:
            fabric = fabrics.get(item['fabric']) or db_api.fabric_get(
                context, item['fabric'])
            kind = item['kind']
            resource_class = (
                resource_classes.for_pool(kind) if kind in ('memory', 'gpu')
                else resource_classes.pci(item['device_class']))
            step = item.get('step_size') or (
                CONF.allocator.memory_extent_mb if kind == 'memory' else 1)
            pool = db_api.pool_create(context, {
                'name': item['name'], 'kind': kind,
                'resource_class': resource_class, 'fabric_id': fabric.id,
                'traits': item.get('traits') or [],
                'reserved': item.get('reserved', 0), 'step_size': step,
                'description': item.get('description')})
            created += 1
        pools[pool.name] = pool
    for item in data.get('memory_nodes') or []:
        if _exists(db_api.memory_node_get, context, item['name']) is None:
            pool = pools.get(item['pool']) or db_api.pool_get(context,
                                                              item['pool'])
            db_api.memory_node_create(context, {
                'name': item['name'], 'pool_id': pool.id,
                'capacity_mb': item['capacity_mb'],
                'reserved_mb': item.get('reserved_mb', 0),
                'exporter': item.get('exporter', 'noop'),
                'portal': item.get('portal'),
                'transport': item.get('transport', 'tcp'),
                'enabled': item.get('enabled', True)})
            created += 1
    for item in data.get('devices') or []:
        pool = pools.get(item['pool']) or db_api.pool_get(context,
                                                          item['pool'])
        if db_api.device_list(context, filters={'pool_id': pool.id,
                                                'address': item['address']}):
            continue
        values = {k: item[k] for k in ('name', 'vendor_id', 'product_id',
                                       'model', 'traits') if k in item}
        values.update({'pool_id': pool.id, 'address': item['address'],
                       'kind': item.get('kind') or (
                           'gpu' if pool.kind == 'gpu' else 'pci')})
        db_api.device_create(context, values)
        created += 1
    return created


def prepare_database():
    """Bring the schema to head (the migrations when they are there)."""
    try:
        from composable.db import migration
    except ImportError:
        migration = None
    if migration is not None and hasattr(migration, 'upgrade'):
        migration.upgrade('head')
    else:
        db_api.create_schema_for_tests()


class APIService(object):
    """The WSGI API server in a thread of its own."""

    def __init__(self, host, port, threads):
        self.host = host
        self.port = port
        self.threads = threads
        self._server = None
        self._thread = None

    def bind(self):
        """Take host:port now (OSError when it cannot, as when another
        process listens there); connections are refused until start()."""
        from composable.common import wsgi_server
        if self._server is None:
            self._server = wsgi_server.make_server(
                None, self.host, self.port, self.threads, listen=False)

    def start(self):
        # Imported here: the API package is only needed when serving it.
        from composable.api import app as api_app
        self.bind()
        application = api_app.setup_app(auth_strategy=CONF.auth_strategy)
        self._server.set_app(application)
        self._server.server_activate()
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name='composable-api', daemon=True)
        self._thread.start()

    def stop(self):
        if self._server is not None and self._thread is not None:
            self._server.shutdown()

    def wait(self):
        if self._thread is not None:
            self._thread.join()
        if self._server is not None and hasattr(self._server,
                                                'server_close'):
            self._server.server_close()
        self._server = self._thread = None


class _UsageReports(object):
    """Starts and stops only the usage reports of a compute agent: the
    agents of composable-all share one process, so none of them takes the
    libvirt hook's socket, and their memory is simulated anyway."""

    def __init__(self, agent):
        self.agent = agent

    def start(self):
        self.agent.start_usage()

    def stop(self):
        self.agent.stop()


def agent_services(context):
    """One agent RPC server per registered host and memory node; the
    compute agents report the (simulated) use of their memory leases."""
    services = []
    for host in db_api.host_list(context):
        agent = agent_manager.AgentManager(host.name,
                                           [agent_manager.COMPUTE_NODE])
        services.append(service.RPCService(rpc.AGENT_TOPIC, host.name,
                                           agent.endpoints,
                                           manager=_UsageReports(agent)))
    for node in db_api.memory_node_list(context):
        agent = agent_manager.AgentManager(node.name,
                                           [agent_manager.MEMORY_NODE])
        services.append(service.RPCService(rpc.AGENT_TOPIC, node.name,
                                           agent.endpoints))
    return services


def _simulated_fabrics(context):
    names = []
    for fabric in db_api.fabric_list(context):
        try:
            driver = fabric_drivers.get_driver(fabric.driver)
        except exception.DriverError:
            continue
        if getattr(driver, 'simulated', False):
            names.append(fabric.name)
    return names


#: What composable-all changes from the production defaults, unless a
#: configuration file sets them: usage sampled every few seconds, and made
#: up (SIMULATED) for the simulated memory of the demo, so that ``lease
#: usage show`` has points within a minute and elastic leases grow and
#: shrink while one watches. (group, option, demo value).
DEMO_DEFAULTS = (
    ('compute_node', 'usage_report_interval', 5),
    ('compute_node', 'simulated_usage', True),
    ('elastic', 'sample_interval', 5),
    ('elastic', 'resize_interval', 5),
    ('elastic', 'shrink_hysteresis', 30),
)


def apply_demo_defaults(conf_=None):
    """The demo's defaults (DEMO_DEFAULTS); values a configuration file
    or the command line gives still win."""
    conf_ = conf_ or CONF
    for group, name, value in DEMO_DEFAULTS:
        conf_.set_default(name, value, group=group)


def standalone_auth_strategy(conf_=None):
    """``noauth`` unless a configuration file asks for ``keystone``.

    The option's default (keystone) is meant for a deployed API; a first
    run of composable-all has no Keystone to ask, so only a value an
    operator wrote turns token validation on.
    """
    conf_ = conf_ or CONF
    location = conf_.get_location('auth_strategy')
    if location is not None and \
            location.location != cfg.Locations.opt_default:
        return conf_.auth_strategy
    return 'noauth'


def address_error(exc, host, port):
    """One line for an API address composable-all cannot listen on."""
    where = '%s:%s' % (host, port)
    if exc.errno == errno.EADDRINUSE:
        return ('composable-all: cannot listen on %s: the address is '
                'already in use, most likely by another composable-all '
                'that is still running (stop it first), or set [api]port '
                'to another port' % where)
    return 'composable-all: cannot listen on %s: %s' % (
        where, exc.strerror or exc)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    CONF.register_cli_opts(_cli_opts)
    # The transport options are registered by oslo.messaging only when the
    # transport is made; register them now to force the in-process one.
    for group, opts in messaging_opts.list_opts():
        if group is None:
            CONF.register_opts(opts)
    service.prepare_service(argv)
    CONF.set_override('transport_url', 'fake://')
    CONF.set_override('auth_strategy', standalone_auth_strategy())
    apply_demo_defaults()

    # The port first: a second composable-all stops here, before it
    # touches the database the first one uses.
    api = APIService(CONF.api.host_ip, CONF.api.port, CONF.api.workers)
    try:
        api.bind()
    except OSError as exc:
        print(address_error(exc, CONF.api.host_ip, CONF.api.port),
              file=sys.stderr)
        return 1
    try:
        db_location.ensure_state_dir(CONF)
        LOG.info('State: %s', db_location.describe(CONF))
        prepare_database()
    except Exception:
        api.wait()
        raise
    context = composable_context.get_admin_context()
    inventory = find_inventory(CONF.inventory)
    if inventory:
        created = load_inventory(context, inventory)
        LOG.info('Inventory %(path)s: %(n)d objects registered',
                 {'path': inventory, 'n': created})
    else:
        LOG.warning('No inventory file found; starting with what the '
                    'database holds')

    rpc.init()
    notifications.init('composable-all')
    conductor = conductor_manager.ConductorManager(CONF.host)
    services = agent_services(context)
    services.append(service.RPCService(rpc.CONDUCTOR_TOPIC, CONF.host,
                                       [conductor], manager=conductor))
    services.append(api)
    stop = threading.Event()

    def _started():
        simulated = _simulated_fabrics(context)
        note = ''
        if simulated:
            note = ' (fabric %s is SIMULATED)' % ', '.join(simulated)
        LOG.info('composable-all listening on http://%(host)s:%(port)s'
                 '%(note)s', {'host': CONF.api.host_ip,
                              'port': CONF.api.port, 'note': note})

    try:
        _run(services, stop, _started)
    except OSError as exc:
        # Two started at the same moment: both took the address, the
        # second to listen fails.
        if exc.errno != errno.EADDRINUSE:
            raise
        print(address_error(exc, CONF.api.host_ip, CONF.api.port),
              file=sys.stderr)
        return 1
    except messaging.MessagingException:
        LOG.exception('Messaging failed')
        return 1
    finally:
        notifications.cleanup()
        rpc.cleanup()
    return 0


def _run(services, stop, on_started):
    started = []
    try:
        for svc in services:
            svc.start()
            started.append(svc)
        on_started()
        service.freeze_startup_objects()
        service.wait_for_signal(stop)
    finally:
        for svc in reversed(started):
            try:
                svc.stop()
            except Exception:
                LOG.exception('Error while stopping %s', svc)
        for svc in reversed(started):
            svc.wait()


if __name__ == '__main__':
    sys.exit(main())
