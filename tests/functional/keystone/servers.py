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

"""A real Keystone and a composable-all validating its tokens, as processes
of the test run on 127.0.0.1.

Keystone runs from a virtualenv of its own (``COMPOSABLE_KEYSTONE_VENV``,
made by ``tox -e keystone``): it needs a newer SQLAlchemy than Nova, which
the functional environment carries, allows. It is bootstrapped on SQLite in
a temporary directory (db_sync, fernet_setup, credential_setup, bootstrap)
and given the people the policy tests need:

- projects ``alpha`` and ``beta``, each with one user per role: ``admin``,
  ``manager``, ``member`` and ``reader`` (``alpha-member`` ...);
- the ``composable`` user in project ``service`` with the ``service`` role,
  which composable's keystonemiddleware uses and which stands for Nova's
  side of composable;
- the ``composable`` service type in the catalog, its public and internal
  endpoints at the composable API.

Both processes inherit the run's tag (tests/functional/leftovers.py), so a
process that outlives the run is found and removed; each is stopped by its
fixture, on failure too.
"""

import concurrent.futures
import os
import signal
import subprocess
import sys
import time

import requests

from tests.functional import stack as stack_mod

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
VENV_VAR = 'COMPOSABLE_KEYSTONE_VENV'
REQUIRE_VAR = 'COMPOSABLE_REQUIRE_KEYSTONE'
DEFAULT_VENV = os.path.join(REPO, '.tox', 'keystone')

PASSWORD = 'secret-%s' % os.getpid()
ADMIN_PASSWORD = 'bootstrap-%s' % os.getpid()
PROJECTS = ('alpha', 'beta')
ROLES = ('admin', 'manager', 'member', 'reader')
SERVICE_USER = 'composable'
SERVICE_PROJECT = 'service'
REGION = 'RegionOne'
# Seconds a Keystone or composable process may take to answer after its
# start, on a busy two-core machine.
START_TIMEOUT = 180


def keystone_venv():
    """The virtualenv that has Keystone, or None."""
    venv = os.environ.get(VENV_VAR) or DEFAULT_VENV
    if os.path.exists(os.path.join(venv, 'bin', 'keystone-manage')):
        return venv
    return None


def wait_until(predicate, timeout, what, proc=None, log=None):
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise RuntimeError('%s: the process exited with %s:\n%s' % (
                what, proc.returncode, _tail(log)))
        if time.monotonic() > deadline:
            raise RuntimeError('%s did not happen within %ss:\n%s' % (
                what, timeout, _tail(log)))
        time.sleep(0.2)


def _tail(path, lines=40):
    if not path or not os.path.exists(path):
        return ''
    with open(path, errors='replace') as f:
        return ''.join(f.readlines()[-lines:])


def _answers(url):
    try:
        return requests.get(url, timeout=5).status_code < 500
    except requests.RequestException:
        return False


def stop_process(proc, timeout=30):
    """SIGTERM, then SIGKILL, to the process group of ``proc``."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout)


class Keystone(object):
    """A real Keystone on SQLite, on a free port of 127.0.0.1."""

    def __init__(self, workdir, venv, composable_endpoint):
        self.workdir = str(workdir)
        self.venv = venv
        self.composable_endpoint = composable_endpoint
        self.port = stack_mod.free_port()
        self.url = 'http://127.0.0.1:%d/v3' % self.port
        self.config = os.path.join(self.workdir, 'keystone.conf')
        self.log = os.path.join(self.workdir, 'keystone.log')
        self.proc = None
        self._tokens = {}
        self.ids = {}

    # ------------------------------------------------------------ set-up

    def _write_config(self):
        w = self.workdir
        with open(self.config, 'w') as f:
            f.write('\n'.join([
                '[DEFAULT]',
                'use_stderr = true',
                '[database]',
                'connection = sqlite:///%s/keystone.db' % w,
                '[token]',
                'provider = fernet',
                '[fernet_tokens]',
                'key_repository = %s/fernet-keys' % w,
                '[fernet_receipts]',
                'key_repository = %s/fernet-receipts' % w,
                '[credential]',
                'key_repository = %s/credential-keys' % w,
                '']))

    def _manage(self, *args):
        user = ['--keystone-user', str(os.getuid()),
                '--keystone-group', str(os.getgid())]
        cmd = [os.path.join(self.venv, 'bin', 'keystone-manage'),
               '--config-file', self.config] + list(args)
        if args[0] in ('fernet_setup', 'credential_setup'):
            cmd += user
        with open(self.log, 'a') as log:
            subprocess.run(cmd, check=True, stdout=log, stderr=log,
                           stdin=subprocess.DEVNULL, timeout=600)

    def start(self):
        self._write_config()
        # The key repositories and the tables are independent of each
        # other: made side by side (each keystone-manage spends seconds
        # importing Keystone on a busy machine); bootstrap needs all three.
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            for made in [pool.submit(self._manage, step) for step in (
                    'db_sync', 'fernet_setup', 'credential_setup')]:
                made.result()
        self._manage('bootstrap', '--bootstrap-password', ADMIN_PASSWORD,
                     '--bootstrap-public-url', self.url,
                     '--bootstrap-internal-url', self.url,
                     '--bootstrap-region-id', REGION)
        self.serve()
        self._populate()

    def serve(self):
        """Start serving the bootstrapped Keystone (again, after
        :meth:`stop`: same port, database and keys, so tokens issued
        before stay valid)."""
        env = dict(os.environ, OS_KEYSTONE_CONFIG_FILES=self.config)
        log = open(self.log, 'a')
        try:
            self.proc = subprocess.Popen(
                [os.path.join(self.venv, 'bin', 'python'),
                 os.path.join(HERE, 'serve.py'), str(self.port)],
                env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                cwd=self.workdir, start_new_session=True)
        finally:
            log.close()
        wait_until(lambda: _answers(self.url), START_TIMEOUT,
                   'Keystone answering on %s' % self.url, self.proc,
                   self.log)

    def stop(self):
        stop_process(self.proc)

    # ------------------------------------------------------ REST helpers

    def password_token(self, username, password, project,
                       project_domain='Default'):
        body = {'auth': {
            'identity': {'methods': ['password'], 'password': {'user': {
                'name': username, 'domain': {'id': 'default'},
                'password': password}}},
            'scope': {'project': {'name': project,
                                  'domain': {'id': 'default'}}}}}
        resp = requests.post(self.url + '/auth/tokens', json=body,
                             timeout=60)
        if resp.status_code != 201:
            raise RuntimeError('no token for %s in %s: %s %s' % (
                username, project, resp.status_code, resp.text))
        return resp.headers['X-Subject-Token'], resp.json()['token']

    def _admin(self, method, path, body=None):
        token = self._tokens.get('bootstrap')
        if token is None:
            token = self.password_token('admin', ADMIN_PASSWORD, 'admin')[0]
            self._tokens['bootstrap'] = token
        resp = requests.request(method, self.url + path, json=body,
                                headers={'X-Auth-Token': token}, timeout=60)
        if resp.status_code >= 400:
            raise RuntimeError('%s %s: %s %s' % (method, path,
                                                 resp.status_code, resp.text))
        return resp.json() if resp.content else None

    def _populate(self):
        roles = {r['name']: r['id']
                 for r in self._admin('GET', '/roles')['roles']}
        for project in PROJECTS + (SERVICE_PROJECT,):
            self.ids[project] = self._admin('POST', '/projects', {
                'project': {'name': project, 'domain_id': 'default'}})[
                    'project']['id']
        people = [('%s-%s' % (p, r), p, r) for p in PROJECTS for r in ROLES]
        people.append((SERVICE_USER, SERVICE_PROJECT, 'service'))
        for name, project, role in people:
            user = self._admin('POST', '/users', {'user': {
                'name': name, 'domain_id': 'default',
                'password': PASSWORD}})['user']
            self.ids[name] = user['id']
            self._admin('PUT', '/projects/%s/users/%s/roles/%s' % (
                self.ids[project], user['id'], roles[role]))
        service = self._admin('POST', '/services', {'service': {
            'name': 'composable', 'type': 'composable',
            'description': 'Composable rack resources'}})['service']
        for interface in ('public', 'internal'):
            self._admin('POST', '/endpoints', {'endpoint': {
                'service_id': service['id'], 'interface': interface,
                'region_id': REGION, 'url': self.composable_endpoint}})

    def user_token(self, username):
        """A project-scoped token of ``username`` (cached)."""
        if username not in self._tokens:
            project = (SERVICE_PROJECT if username == SERVICE_USER
                       else username.split('-')[0])
            self._tokens[username] = self.password_token(
                username, PASSWORD, project)[0]
        return self._tokens[username]


class ComposableAll(object):
    """composable-all on a free port, validating Keystone's tokens with
    keystonemiddleware."""

    # Seconds keystonemiddleware keeps a validated token: a token revoked
    # in Keystone is refused at the latest this long after. Short here so
    # that the tests can see it happen.
    TOKEN_CACHE_TIME = 10

    def __init__(self, workdir, port=None):
        self.workdir = str(workdir)
        self.port = port or stack_mod.free_port()
        self.endpoint = 'http://127.0.0.1:%d' % self.port
        self.config = os.path.join(self.workdir, 'composable.conf')
        self.log = os.path.join(self.workdir, 'composable-all.log')
        self.proc = None

    def write_config(self, keystone):
        sections = [
            ('DEFAULT', {
                'auth_strategy': 'keystone',
                'host': 'conductor-ks',
                'log_file': self.log,
            }),
            ('api', {'host_ip': '127.0.0.1', 'port': self.port,
                     'workers': 4}),
            ('database', {'connection': 'sqlite:///%s/composable.db'
                          % self.workdir}),
            ('oslo_concurrency', {'lock_path': self.workdir}),
            ('keystone_authtoken', {
                'www_authenticate_uri': keystone.url,
                'auth_url': keystone.url,
                'auth_type': 'password',
                'username': SERVICE_USER,
                'password': PASSWORD,
                'user_domain_name': 'Default',
                'project_name': SERVICE_PROJECT,
                'project_domain_name': 'Default',
                'region_name': REGION,
                'service_token_roles_required': 'true',
                'token_cache_time': self.TOKEN_CACHE_TIME,
            }),
        ]
        with open(self.config, 'w') as f:
            for name, values in sections:
                f.write('[%s]\n' % name)
                for key, value in values.items():
                    f.write('%s = %s\n' % (key, value))

    def start(self, keystone):
        self.write_config(keystone)
        # The tree under test, whatever the environment has installed.
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [REPO] + [p for p in os.environ.get('PYTHONPATH', '').split(
                os.pathsep) if p]))
        cmd = [sys.executable, '-m', 'composable.cmd.all',
               '--config-file', self.config]
        with open(os.path.join(self.workdir, 'composable-all.out'),
                  'w') as out:
            self.proc = subprocess.Popen(
                cmd, env=env, stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.workdir, start_new_session=True)
        wait_until(lambda: _answers(self.endpoint + '/'), START_TIMEOUT,
                   'composable-all answering on %s' % self.endpoint,
                   self.proc, self.log)

    def stop(self):
        stop_process(self.proc)
