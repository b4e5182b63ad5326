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

"""A small real cloud for the Heat tests, as processes on 127.0.0.1:

- Keystone (tests/functional/keystone/servers.py), with what Heat needs
  besides the projects and users of the policy tests: the ``heat`` service
  user (``admin`` in project ``service``), the ``heat`` domain for stack
  users and its admin ``heat_domain_admin``, the ``heat_stack_owner`` and
  ``heat_stack_user`` roles (``alpha-member`` holds ``heat_stack_owner``
  too, as DevStack gives it to its users), and the ``orchestration`` and
  ``composable`` services in the catalog;
- composable as deployments run it (tests/functional/stack.py):
  composable-api with ``auth_strategy = keystone``, composable-conductor
  and two composable-agents (``compute-0``, ``memory-0``), over a RabbitMQ
  virtual host of their own, on a MariaDB database of their own, with the
  demo inventory registered by the cloud admin (the agents use the
  ``noop`` memory exporter and the ``fake`` fabric: tgt, iSCSI and a PCIe
  switch are not what these tests are about);
- heat-engine and heat-api from the ``openstack-heat`` package of this
  environment, on a MariaDB database of their own and the same virtual
  host, with composable's resource plugin loaded the way
  doc/source/user/heat.rst tells operators: ``composable`` installed in
  Heat's environment, ``composable/heat`` in ``plugin_dirs``.

Every process carries the run's tag (tests/functional/leftovers.py);
:meth:`Cloud.stop` stops them and removes the virtual host and the
databases, also after a failed start.
"""

import concurrent.futures
import contextlib
import os
import signal
import subprocess
import sys
import uuid

import composable.heat
from tests.functional.keystone import servers
from tests.functional import leftovers
from tests.functional import stack as stack_mod

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)
RABBIT = os.environ.get('COMPOSABLE_TRANSPORT_URL',
                        'rabbit://guest:guest@127.0.0.1:5672/')
MARIADB = dict(host='127.0.0.1', user='root', password='')

HEAT_USER = 'heat'
HEAT_DOMAIN = 'heat'
HEAT_DOMAIN_ADMIN = 'heat_domain_admin'
HEAT_ROLES = ('heat_stack_owner', 'heat_stack_user')
# Seconds composable's conductor waits for an agent to bind.
BIND_TIMEOUT = 300
# heat-manage db_sync runs a hundred migrations: minutes on a busy machine.
SETUP_TIMEOUT = 900


def heat_etc():
    """Heat's etc/heat as the wheel installs it under the prefix."""
    return os.path.join(sys.prefix, 'etc', 'heat')


def plugin_dir():
    """What an operator puts in heat-engine's plugin_dirs."""
    return os.path.dirname(os.path.abspath(composable.heat.__file__))


class MariaDB(object):
    """Databases of this run on the machine's MariaDB, dropped by
    :meth:`drop_all`."""

    def __init__(self):
        import pymysql
        self.conn = pymysql.connect(autocommit=True, **MARIADB)
        self.names = []

    def create(self, purpose):
        name = 'composable_%s_%s_%s' % (purpose, leftovers.run_tag(),
                                        uuid.uuid4().hex[:6])
        with self.conn.cursor() as cur:
            cur.execute('CREATE DATABASE `%s` CHARACTER SET utf8mb4' % name)
        self.names.append(name)
        return 'mysql+pymysql://root@127.0.0.1/%s?charset=utf8mb4' % name

    def drop_all(self):
        with self.conn.cursor() as cur:
            while self.names:
                cur.execute('DROP DATABASE IF EXISTS `%s`' % self.names[-1])
                self.names.pop()
        self.conn.close()


class HeatKeystone(servers.Keystone):
    """Keystone with Heat's users, domain, roles and endpoints."""

    def __init__(self, workdir, venv, composable_endpoint):
        super(HeatKeystone, self).__init__(workdir, venv,
                                           composable_endpoint)
        self.heat_endpoint = None

    def add_heat(self, heat_port):
        self.heat_endpoint = 'http://127.0.0.1:%d/v1/%%(tenant_id)s' % (
            heat_port)
        roles = {r['name']: r['id']
                 for r in self._admin('GET', '/roles')['roles']}
        for name in HEAT_ROLES:
            roles[name] = self._admin('POST', '/roles', {
                'role': {'name': name}})['role']['id']
        heat = self._admin('POST', '/users', {'user': {
            'name': HEAT_USER, 'domain_id': 'default',
            'password': servers.PASSWORD}})['user']
        self.ids[HEAT_USER] = heat['id']
        self._admin('PUT', '/projects/%s/users/%s/roles/%s' % (
            self.ids[servers.SERVICE_PROJECT], heat['id'], roles['admin']))
        domain = self._admin('POST', '/domains', {'domain': {
            'name': HEAT_DOMAIN,
            'description': 'Users and projects Heat makes for stacks'}})[
                'domain']
        self.ids[HEAT_DOMAIN] = domain['id']
        domain_admin = self._admin('POST', '/users', {'user': {
            'name': HEAT_DOMAIN_ADMIN, 'domain_id': domain['id'],
            'password': servers.PASSWORD}})['user']
        self._admin('PUT', '/domains/%s/users/%s/roles/%s' % (
            domain['id'], domain_admin['id'], roles['admin']))
        # Stack owners, as DevStack makes its demo users.
        self._admin('PUT', '/projects/%s/users/%s/roles/%s' % (
            self.ids['alpha'], self.ids['alpha-member'],
            roles['heat_stack_owner']))
        service = self._admin('POST', '/services', {'service': {
            'name': 'heat', 'type': 'orchestration',
            'description': 'Orchestration'}})['service']
        for interface in ('public', 'internal'):
            self._admin('POST', '/endpoints', {'endpoint': {
                'service_id': service['id'], 'interface': interface,
                'region_id': servers.REGION, 'url': self.heat_endpoint}})

    def admin_token(self):
        return self.password_token('admin', servers.ADMIN_PASSWORD,
                                   'admin')[0]


class Heat(object):
    """heat-engine and heat-api (heat.api.openstack.wsgi served by
    serve_heat_api.py, a threaded WSGI server) of this environment."""

    def __init__(self, workdir, keystone, db_url, transport_url):
        self.workdir = os.path.join(str(workdir), 'heat')
        os.makedirs(self.workdir, exist_ok=True)
        self.keystone = keystone
        self.db_url = db_url
        self.transport_url = transport_url
        self.port = stack_mod.free_port()
        self.url = 'http://127.0.0.1:%d' % self.port
        self.config = os.path.join(self.workdir, 'heat.conf')
        self.auth_encryption_key = uuid.uuid4().hex
        self.procs = {}

    def write_config(self):
        ks = self.keystone
        password_auth = {
            'auth_type': 'password',
            'auth_url': ks.url,
            'username': HEAT_USER,
            'password': servers.PASSWORD,
            'user_domain_name': 'Default',
        }
        sections = [
            ('DEFAULT', {
                'host': 'heat-%s' % leftovers.run_tag(),
                'transport_url': self.transport_url,
                'debug': os.environ.get('COMPOSABLE_STACK_DEBUG', 'false'),
                'plugin_dirs': plugin_dir(),
                'region_name_for_services': servers.REGION,
                'stack_user_domain_name': HEAT_DOMAIN,
                'stack_domain_admin': HEAT_DOMAIN_ADMIN,
                'stack_domain_admin_password': servers.PASSWORD,
                'auth_encryption_key': self.auth_encryption_key,
                'num_engine_workers': 1,
                # A failed resource action is retried (the failed lease
                # deleted, a new one asked for) once rather than five
                # times: the path through a retry is the same, without
                # a minute of growing back-off on every refused lease.
                'action_retry_limit': 1,
                'template_dir': os.path.join(heat_etc(), 'templates'),
                'environment_dir': os.path.join(heat_etc(),
                                                'environment.d'),
                'heat_metadata_server_url': self.url,
                'heat_waitcondition_server_url':
                    self.url + '/v1/waitcondition',
            }),
            ('database', {'connection': self.db_url}),
            ('paste_deploy', {
                'api_paste_config': os.path.join(heat_etc(),
                                                 'api-paste.ini')}),
            ('keystone_authtoken', dict(
                password_auth, www_authenticate_uri=ks.url,
                project_name=servers.SERVICE_PROJECT,
                project_domain_name='Default',
                region_name=servers.REGION)),
            ('trustee', password_auth),
            ('clients_keystone', {'auth_uri': ks.url.rsplit('/v3', 1)[0]}),
            ('ec2authtoken', {'auth_uri': ks.url}),
            ('oslo_concurrency', {'lock_path': self.workdir}),
            ('oslo_messaging_rabbit', {'heartbeat_timeout_threshold': 0}),
        ]
        with open(self.config, 'w') as f:
            for name, values in sections:
                f.write('[%s]\n' % name)
                for key, value in values.items():
                    f.write('%s = %s\n' % (key, value))
                f.write('\n')

    def _log(self, name):
        return os.path.join(self.workdir, '%s.log' % name)

    def _spawn(self, name, argv):
        with open(self._log(name), 'ab') as out:
            self.procs[name] = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, cwd=self.workdir,
                start_new_session=True)
        return self.procs[name]

    def start(self):
        self.db_sync()
        self.serve()

    def db_sync(self):
        """Write heat.conf and make Heat's tables (nothing else has to
        run for that: the cloud does it while Keystone starts)."""
        self.write_config()
        with open(self._log('heat-manage'), 'ab') as out:
            subprocess.run([os.path.join(BIN, 'heat-manage'),
                            '--config-file', self.config, 'db_sync'],
                           check=True, stdout=out, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, timeout=SETUP_TIMEOUT)

    def serve(self):
        """Start heat-api and heat-engine on the synced database."""
        api = self._spawn('heat-api', [
            sys.executable, os.path.join(HERE, 'serve_heat_api.py'),
            str(self.port), self.config])
        servers.wait_until(lambda: servers._answers(self.url + '/'),
                           servers.START_TIMEOUT,
                           'heat-api answering on %s' % self.url, api,
                           self._log('heat-api'))
        self.start_engine()

    def kill_engine(self):
        """SIGKILL heat-engine and its workers, as a crash would."""
        proc = self.procs.pop('heat-engine')
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(servers.START_TIMEOUT)

    def start_engine(self):
        """Start heat-engine and wait until it has registered itself (a
        service record newer than any before: a killed engine leaves its
        own behind)."""
        before = self._engine_records()
        engine = self._spawn('heat-engine', [
            os.path.join(BIN, 'heat-engine'), '--config-file', self.config])
        servers.wait_until(
            lambda: self._engine_records() - before, servers.START_TIMEOUT,
            'heat-engine reporting as up', engine, self._log('heat-engine'))

    def _engine_records(self):
        """The ids of heat-engine's service records (what ``openstack
        orchestration service list`` shows)."""
        import sqlalchemy as sa
        engine = sa.create_engine(self.db_url)
        try:
            with engine.connect() as conn:
                return {row[0] for row in conn.execute(sa.text(
                    "SELECT id FROM service WHERE `binary` = "
                    "'heat-engine'"))}
        finally:
            engine.dispose()

    def log(self, name):
        try:
            with open(self._log(name), errors='replace') as f:
                return f.read()
        except OSError:
            return ''

    def stop(self):
        for name in list(self.procs):
            servers.stop_process(self.procs.pop(name))


class Cloud(object):
    """Keystone, composable and Heat; see the module's docstring."""

    def __init__(self, workdir, keystone_venv):
        self.workdir = str(workdir)
        self.keystone_venv = keystone_venv
        self.dbs = None
        self.composable = None
        self.keystone = None
        self.heat = None

    def start(self):
        self.dbs = MariaDB()
        composable_db = self.dbs.create('heatsvc')
        heat_db = self.dbs.create('heat')
        composable_dir = os.path.join(self.workdir, 'composable')
        os.makedirs(composable_dir)
        # A bind waits for the agent as long as a busy machine may need;
        # tests/heat_functional/test_crash.py holds it there on purpose.
        self.composable = stack_mod.Stack(composable_dir, composable_db,
                                          RABBIT,
                                          bind_timeout=BIND_TIMEOUT)
        self.keystone = HeatKeystone(self.workdir, self.keystone_venv,
                                     self.composable.endpoint)
        self.heat = Heat(self.workdir, self.keystone, heat_db,
                         self.composable.transport_url)
        # The two databases' migrations (Heat's are a hundred: minutes on
        # a busy machine) need nothing else running: they go on while
        # Keystone starts. Leaving the block waits for both, also when
        # Keystone failed.
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            heat_tables = pool.submit(self.heat.db_sync)
            composable_tables = pool.submit(self.composable.dbsync)
            self.keystone.start()
            self.keystone.add_heat(self.heat.port)
            heat_tables.result()
            composable_tables.result()
        self.composable.extra.update({
            'DEFAULT': {'auth_strategy': 'keystone'},
            'keystone_authtoken': {
                'www_authenticate_uri': self.keystone.url,
                'auth_url': self.keystone.url,
                'auth_type': 'password',
                'username': servers.SERVICE_USER,
                'password': servers.PASSWORD,
                'user_domain_name': 'Default',
                'project_name': servers.SERVICE_PROJECT,
                'project_domain_name': 'Default',
                'region_name': servers.REGION,
            },
        })
        self.composable.start_conductor('conductor-0')
        self.composable.wait_conductor('conductor-0')
        self.composable.start_agent('compute-0', roles='compute_node')
        self.composable.start_agent('memory-0', roles='memory_node')
        self.composable.start_api()
        stack_mod.demo_inventory(self.admin_client())
        self.heat.serve()

    def client(self, token):
        """stack_mod.Client speaking with a Keystone token."""
        client = stack_mod.Client(self.composable.endpoint)
        client.headers = {'X-Auth-Token': token,
                          'OpenStack-API-Version': 'composable 1.0'}
        return client

    def admin_client(self):
        return self.client(self.keystone.admin_token())

    def user_client(self, username):
        return self.client(self.keystone.user_token(username))

    def os_variables(self, username):
        """OS_* variables of ``username`` for the openstack command."""
        project = username.split('-')[0]
        return {
            'OS_AUTH_URL': self.keystone.url,
            'OS_IDENTITY_API_VERSION': '3',
            'OS_USERNAME': username,
            'OS_PASSWORD': servers.PASSWORD,
            'OS_PROJECT_NAME': project,
            'OS_USER_DOMAIN_NAME': 'Default',
            'OS_PROJECT_DOMAIN_NAME': 'Default',
            'OS_REGION_NAME': servers.REGION,
            'OS_INTERFACE': 'public',
        }

    def logs(self):
        """The tail of every service's log, for a failure message."""
        parts = []
        if self.heat is not None:
            for name in ('heat-engine', 'heat-api'):
                parts.append('--- %s\n%s' % (name,
                                             self.heat.log(name)[-6000:]))
        if self.composable is not None:
            for name in ('api-0', 'conductor-0'):
                for text in self.composable.log(name):
                    parts.append('--- %s\n%s' % (name, text[-3000:]))
        return '\n'.join(parts)

    def log_files(self):
        """Every log file of Heat and composable."""
        found = []
        for directory in (self.heat.workdir, self.composable.workdir):
            found += [os.path.join(directory, name)
                      for name in sorted(os.listdir(directory))
                      if name.endswith(('.log', '.out'))]
        return found

    def stop(self):
        # Heat first: it talks to the others; the virtual host goes with
        # composable; the databases last, once nothing uses them.
        with contextlib.ExitStack() as stack:
            if self.dbs is not None:
                stack.callback(self.dbs.drop_all)
            if self.keystone is not None:
                stack.callback(self.keystone.stop)
            if self.composable is not None:
                stack.callback(self.composable.stop)
            if self.heat is not None:
                stack.callback(self.heat.stop)
