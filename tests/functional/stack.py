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

"""Runs composable as real processes for functional tests and benchmarks:
``composable-api``, ``composable-conductor`` and ``composable-agent``, each
its own process with its own config file, talking over RabbitMQ to a
database server.

Each Stack gets a RabbitMQ virtual host of its own. oslo.messaging names
its queues after the topic and server ("composable-conductor",
"composable-agent.memory-0") whatever the control exchange, so two stacks
on one broker and one vhost would share queues: a conductor of one test
would answer the API of another and write to the wrong database.
"""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import uuid

import requests

from tests.functional import leftovers

BIN = os.path.dirname(sys.executable)


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def _command(name):
    path = os.path.join(BIN, name)
    if os.path.exists(path):
        return [path]
    # Not installed as a console script (a source checkout): run the
    # module directly.
    module = {'composable-api': 'composable.cmd.api',
              'composable-conductor': 'composable.cmd.conductor',
              'composable-agent': 'composable.cmd.agent',
              'composable-dbsync': 'composable.cmd.dbsync'}[name]
    return [sys.executable, '-c',
            'import sys; from %s import main; sys.exit(main())' % module]


def uwsgi_binary():
    """The uwsgi of this environment (the pyuwsgi wheel), else the one on
    PATH; None when there is none."""
    path = os.path.join(BIN, 'uwsgi')
    if os.path.exists(path):
        return path
    import shutil
    return shutil.which('uwsgi')


class Stack(object):
    def __init__(self, workdir, db_url, transport_url,
                 heartbeat_interval=1, heartbeat_timeout=6,
                 periodic_interval=1, bind_timeout=10, extra=None):
        self.workdir = str(workdir)
        self.db_url = db_url
        self.exchange = 'composable-test-%s-%s' % (leftovers.run_tag(),
                                                   uuid.uuid4().hex[:6])
        self.vhost = None
        self.transport_url = self._own_vhost(transport_url)
        self.api_port = free_port()
        self.endpoint = 'http://127.0.0.1:%d' % self.api_port
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self.periodic_interval = periodic_interval
        self.bind_timeout = bind_timeout
        self.extra = extra or {}
        self.procs = {}

    def _own_vhost(self, transport_url):
        """The transport URL on a new vhost of this stack's own."""
        parsed = urllib.parse.urlsplit(transport_url)
        if not parsed.scheme.startswith('rabbit'):
            return transport_url
        vhost = self.exchange
        user = parsed.username or 'guest'
        subprocess.run(['rabbitmqctl', '-q', 'add_vhost', vhost],
                       check=True, capture_output=True, timeout=60)
        subprocess.run(['rabbitmqctl', '-q', 'set_permissions', '-p', vhost,
                        user, '.*', '.*', '.*'],
                       check=True, capture_output=True, timeout=60)
        self.vhost = vhost
        return urllib.parse.urlunsplit(parsed._replace(path='/' + vhost))

    def _drop_vhost(self):
        if self.vhost is not None:
            subprocess.run(['rabbitmqctl', '-q', 'delete_vhost', self.vhost],
                           capture_output=True, timeout=60)
            self.vhost = None

    # ------------------------------------------------------------ config

    def config_file(self, host):
        path = os.path.join(self.workdir, '%s.conf' % host)
        sections = {
            'DEFAULT': {
                'host': host,
                'transport_url': self.transport_url,
                'control_exchange': self.exchange,
                'auth_strategy': 'noauth',
                'rpc_response_timeout': 30,
                'rpc_response_timeout_bind': self.bind_timeout,
                'log_file': os.path.join(self.workdir, '%s.log' % host),
                'debug': os.environ.get('COMPOSABLE_STACK_DEBUG', 'false'),
            },
            'database': {'connection': self.db_url,
                         'max_pool_size': 20, 'max_overflow': 40},
            'api': {'host_ip': '127.0.0.1', 'port': self.api_port,
                    'workers': 32},
            'conductor': {'heartbeat_interval': self.heartbeat_interval,
                          'heartbeat_timeout': self.heartbeat_timeout,
                          'periodic_interval': self.periodic_interval,
                          'workers': 16},
            'oslo_messaging_rabbit': {'heartbeat_timeout_threshold': 0},
        }
        for section, values in self.extra.items():
            sections.setdefault(section, {}).update(values)
        with open(path, 'w') as conf:
            for section, values in sections.items():
                conf.write('[%s]\n' % section)
                for key, value in values.items():
                    conf.write('%s = %s\n' % (key, value))
                conf.write('\n')
        return path

    # ------------------------------------------------------------ processes

    def _start(self, name, command, host, args=()):
        conf = self.config_file(host)
        return self._spawn(name, _command(command) +
                           ['--config-file', conf] + list(args))

    def _spawn(self, name, argv, env=None):
        out = open(os.path.join(self.workdir, '%s.out' % name), 'ab')
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        self.procs[name] = proc
        return proc

    def dbsync(self):
        conf = self.config_file('dbsync')
        subprocess.run(_command('composable-dbsync') +
                       ['--config-file', conf, 'upgrade'], check=True,
                       stdin=subprocess.DEVNULL, capture_output=True)

    def start_conductor(self, host='conductor-0'):
        return self._start(host, 'composable-conductor', host)

    def start_agent(self, host, roles='memory_node,compute_node'):
        self.extra.setdefault('agent', {})['roles'] = roles
        return self._start(host, 'composable-agent', host)

    def start_api(self, host='api-0'):
        proc = self._start(host, 'composable-api', host)
        self.wait_http()
        return proc

    def start_api_uwsgi(self, host='api-0', processes=1, threads=8,
                        socket='http'):
        """composable.wsgi.api under uWSGI, as deployments run it:
        ``processes`` workers of ``threads`` threads, the configuration
        named in the environment. ``socket`` is "http" (an HTTP socket in
        the workers, one connection per request), or "router" (uWSGI's
        HTTP router in front, keeping client connections alive, talking
        to the workers over the uwsgi protocol).
        """
        env = dict(os.environ)
        env['OS_COMPOSABLE_CONFIG_FILES'] = self.config_file(host)
        address = '127.0.0.1:%d' % self.api_port
        if socket == 'router':
            listen = ['--http', address, '--http-keepalive',
                      '--socket', os.path.join(self.workdir, host + '.sock')]
        else:
            # It closes the connection after each response: say so, or
            # an HTTP/1.1 client sends its next request into a closed
            # socket.
            listen = ['--http-socket', address,
                      '--add-header', 'Connection: close']
        argv = [uwsgi_binary()] + listen + [
            '--module', 'composable.wsgi.api:application',
            '--master', '--processes', str(processes),
            '--threads', str(threads),
            # Each worker builds the application (and its RPC
            # connections) itself, after the fork.
            '--lazy-apps', '--die-on-term', '--need-app',
            '--disable-logging', '--procname-prefix', host + ' ']
        proc = self._spawn(host, argv, env=env)
        self.wait_http()
        return proc

    def wait_http(self, timeout=180):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                requests.get(self.endpoint + '/', timeout=2)
                return
            except (requests.ConnectionError, requests.Timeout):
                # Timeout: uWSGI's master accepts as soon as it listens;
                # the answer waits until a worker has loaded the app.
                time.sleep(0.2)
        raise RuntimeError('composable-api did not answer on %s; see %s' %
                           (self.endpoint, self.workdir))

    def wait_conductor(self, host='conductor-0', timeout=180):
        """Wait until the conductor has written its first heartbeat."""
        import sqlalchemy as sa
        engine = sa.create_engine(self.db_url)
        deadline = time.time() + timeout
        try:
            while time.time() < deadline:
                with engine.connect() as conn:
                    row = conn.execute(sa.text(
                        'SELECT online FROM conductors WHERE hostname = :h'),
                        {'h': host}).first()
                if row and row[0]:
                    return
                time.sleep(0.2)
        finally:
            engine.dispose()
        raise RuntimeError('conductor %s never reported; see %s' %
                           (host, self.workdir))

    def kill(self, name, sig=signal.SIGKILL):
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def stop(self):
        for name in list(self.procs):
            self.kill(name, signal.SIGTERM)
        self._drop_vhost()

    def log(self, name):
        for suffix in ('.log', '.out'):
            path = os.path.join(self.workdir, name + suffix)
            if os.path.exists(path):
                with open(path, errors='replace') as f:
                    yield f.read()


class Client(object):
    """A small HTTP client for the API as a project or an admin."""

    def __init__(self, endpoint, project='demo', roles='admin,member,reader',
                 session=None):
        self.endpoint = endpoint.rstrip('/') + '/v1'
        self.session = session or requests.Session()
        self.headers = {'X-Project-Id': project, 'X-Roles': roles,
                        'OpenStack-API-Version': 'composable 1.0'}

    def request(self, method, path, json=None, expect=None, **kwargs):
        resp = self.session.request(method, self.endpoint + path, json=json,
                                    headers=self.headers, timeout=60,
                                    **kwargs)
        if expect is not None and resp.status_code != expect:
            raise AssertionError('%s %s: expected %s, got %s: %s' % (
                method, path, expect, resp.status_code, resp.text))
        return resp

    def post(self, path, body, expect=None):
        return self.request('POST', path, json=body, expect=expect)

    def get(self, path, expect=200):
        return self.request('GET', path, expect=expect)

    def delete(self, path, expect=204):
        return self.request('DELETE', path, expect=expect)

    def wait_lease(self, uuid, statuses, timeout=180):
        deadline = time.time() + timeout
        while True:
            lease = self.get('/leases/%s' % uuid).json()
            if lease['status'] in statuses:
                return lease
            if time.time() > deadline:
                raise AssertionError('lease %s stayed %s (fault: %s)' % (
                    uuid, lease['status'], lease.get('fault')))
            time.sleep(0.1)


def demo_inventory(admin, memory_nodes=('memory-0',), node_mb=16384,
                   hosts=('compute-0', 'compute-1'), gpus=4, step=1024):
    """Registers a fabric, hosts, a memory pool and a GPU pool through the
    API, as an operator would."""
    admin.post('/fabrics', {'name': 'fabric-0', 'driver': 'fake'},
               expect=201)
    for i, host in enumerate(hosts):
        admin.post('/hosts', {
            'name': host, 'fabric': 'fabric-0',
            'initiator_iqn': 'iqn.2026-11.org.openstack:%s' % host},
            expect=201)
    admin.post('/pools', {'name': 'memory-pool', 'kind': 'memory',
                          'fabric': 'fabric-0', 'step_size': step},
               expect=201)
    for node in memory_nodes:
        admin.post('/memory_nodes', {'name': node, 'pool': 'memory-pool',
                                     'capacity_mb': node_mb,
                                     'portal': '127.0.0.1:3260'},
                   expect=201)
    admin.post('/pools', {'name': 'gpu-pool', 'kind': 'gpu',
                          'fabric': 'fabric-0'}, expect=201)
    for i in range(gpus):
        admin.post('/devices', {'pool': 'gpu-pool', 'kind': 'gpu',
                                'address': 'fake-gpu-%d' % i,
                                'model': 'FakeGPU-16G'}, expect=201)
