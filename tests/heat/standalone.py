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

"""A real composable for the Heat tests: ``composable-all`` in a child
process on a free 127.0.0.1 port, SQLite in a temporary directory, the
demo inventory (16384 MiB of memory in memory-pool, four FakeGPU-16G in
gpu-pool, hosts compute-0 and compute-1), no authentication.

Heat reaches it through its own client plugin code; the keystoneauth
plugin below stands in for Keystone (the standalone service trusts the
X-Project-Id and X-Roles headers) and answers the catalog look-up for
the ``composable`` service type with the child's endpoint.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from keystoneauth1 import plugin
import requests

START_TIMEOUT = 180


def _free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


class Composable(object):
    """composable-all in a child process."""

    def __init__(self):
        self.workdir = tempfile.mkdtemp(prefix='composable-heat-')
        self.port = _free_port()
        self.endpoint = 'http://127.0.0.1:%d' % self.port
        self.log_path = os.path.join(self.workdir, 'composable-all.log')
        self.proc = None

    def start(self):
        config = os.path.join(self.workdir, 'all.conf')
        with open(config, 'w') as f:
            f.write('[DEFAULT]\nhost = heat-test\n'
                    '[database]\nconnection = sqlite:///%s\n'
                    '[api]\nhost_ip = 127.0.0.1\nport = %d\n'
                    % (os.path.join(self.workdir, 'all.sqlite'), self.port))
        out = open(self.log_path, 'ab')
        try:
            self.proc = subprocess.Popen(
                [sys.executable, '-c',
                 'import sys; from composable.cmd.all import main; '
                 'sys.exit(main())', '--config-file', config],
                stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, cwd=self.workdir,
                start_new_session=True)
        finally:
            out.close()
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                requests.get(self.endpoint + '/', timeout=5)
                return
            except requests.ConnectionError:
                if self.proc.poll() is not None or \
                        time.monotonic() > deadline:
                    log = self.log()
                    self.stop()
                    raise RuntimeError('composable-all did not answer on '
                                       '%s: %s' % (self.endpoint, log))
                time.sleep(0.3)

    def log(self):
        try:
            with open(self.log_path) as f:
                return f.read()
        except OSError:
            return ''

    def kill(self):
        """SIGKILL the child, as a crash would; its database stays, and
        start() runs the service again on it, on the same port."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self):
        """Stop the child (SIGTERM, then SIGKILL) and remove its files."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def post(self, path, project_id, body, roles='member,reader',
             version=None):
        """POST to the API as ``roles`` of ``project_id`` (for what Heat
        does not make: an admin's inventory)."""
        headers = {'X-Project-Id': project_id, 'X-Roles': roles}
        if version:
            headers['OpenStack-API-Version'] = 'composable %s' % version
        return requests.post(self.endpoint + '/v1/' + path, json=body,
                             headers=headers, timeout=30)

    def get(self, path, project_id, **params):
        """GET from the API as a member of ``project_id`` (for checks made
        beside Heat)."""
        resp = requests.get(self.endpoint + '/v1/' + path, params=params,
                            headers={'X-Project-Id': project_id,
                                     'X-Roles': 'member,reader'},
                            timeout=30)
        return resp


class StandaloneAuth(plugin.BaseAuthPlugin):
    """keystoneauth plugin for a composable with auth_strategy noauth.

    It authenticates as a member of ``project_id`` the way the standalone
    service expects (headers instead of a token) and gives ``endpoint``
    for the composable service type: what Keystone's catalog gives in a
    cloud.
    """

    def __init__(self, endpoint, project_id, user_id='heat-test-user'):
        super(StandaloneAuth, self).__init__()
        self.endpoint = endpoint
        self.project_id = project_id
        self.user_id = user_id

    def get_headers(self, session, **kwargs):
        return {'X-Project-Id': self.project_id, 'X-User-Id': self.user_id,
                'X-Roles': 'member,reader'}

    def get_endpoint(self, session, service_type=None, **kwargs):
        if service_type == 'composable':
            return self.endpoint
        return None

    def get_project_id(self, session, **kwargs):
        return self.project_id

    def get_user_id(self, session, **kwargs):
        return self.user_id
