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

"""composable-api, -conductor and -agent as real processes (over RabbitMQ
on MariaDB, as tests/functional/stack.py runs them), with a Redfish
fabric on the project's emulator whose system ``compute-host`` is the
compute host guest: a GPU lease bound to ``compute-host`` is composed
into the guest by hot-plug, and the agent's PCI work runs inside the
guest (agent_on_host, guest_bus). Shared by the end-to-end tests and
tools/bench/device_bind.py.
"""

import os
import sys
import time

from tests.functional.compute_host import agent_on_host
from tests.functional.compute_host import stack as host_stack
from tests.functional.dataplane import env
from tests.functional import stack as stack_mod

HOST = host_stack.HOST['name']
FABRIC = 'rack'
POOL = 'gpu'
INITIATOR = 'iqn.2026-11.org.openstack:%s' % HOST
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..',
                                    '..'))
SERVING = 'Serving RPC topic composable-agent as %s' % HOST
GPU_BLOCKS = [b['id'] for b in host_stack.CONFIG['blocks']
              if b['kind'] == 'gpu']


class HostServices(object):
    """The processes, the inventory and the fabric; ``stop()`` removes
    them whatever happened (the processes, the RabbitMQ vhost, the
    database; the fabric's functions are unplugged by its context)."""

    def __init__(self, workdir, host, fabric, bind_timeout=60,
                 find_timeout=30, reconcile_interval=2):
        env.check_tools()
        self.workdir = str(workdir)
        self.host = host
        self.fabric = fabric
        self.pause_file = os.path.join(self.workdir, 'pause-attach')
        self.db_url, self._drop = env.mariadb_database()
        extra = {
            'agent': {'report_interval': 5},
            'compute_node': {
                'initiator_iqn': INITIATOR,
                'pci_backend': 'sysfs',
                'pci_find_timeout': find_timeout,
                'pci_state_file': os.path.join(self.workdir,
                                               'pci-devices.json'),
                'nova_config_files': os.path.join(self.workdir,
                                                  'nova.conf'),
                'hook_socket': ''},
            'fabric': {'enabled_drivers': 'fake,redfish'},
            'conductor': {'fabric_sync_interval': 2,
                          'reconcile_interval': reconcile_interval,
                          'reconcile_retry_backoff': 1,
                          'reconcile_retry_max_backoff': 4},
        }
        self.stack = stack_mod.Stack(self.workdir, self.db_url, env.RABBIT,
                                     bind_timeout=bind_timeout, extra=extra)
        self.endpoint = self.stack.endpoint

    # ------------------------------------------------------------ life

    def start(self):
        s = self.stack
        s.dbsync()
        s.start_conductor('conductor-0')
        s.wait_conductor('conductor-0')
        self.start_agent()
        s.start_api()
        self.admin = stack_mod.Client(s.endpoint, project='admin')
        self.user = stack_mod.Client(s.endpoint, project='project-a',
                                     roles='member,reader')
        self.admin.post('/fabrics', {
            'name': FABRIC, 'driver': 'redfish',
            'driver_info': self.fabric.info['driver_info']}, expect=201)
        self.admin.post('/hosts', {'name': HOST, 'fabric': FABRIC,
                                   'initiator_iqn': INITIATOR}, expect=201)
        self.admin.post('/pools', {'name': POOL, 'kind': 'gpu',
                                   'fabric': FABRIC}, expect=201)
        self.devices = self.wait_devices()
        return self

    def start_agent(self, timeout=300):
        """Start the agent for the host guest and return once it takes
        RPC requests (a call sent before its queue exists is lost)."""
        before = self.logs().count(SERVING)
        environ = dict(os.environ)
        environ[agent_on_host.GUEST_UUID_ENV] = self.host.uuid
        environ[agent_on_host.PAUSE_FILE_ENV] = self.pause_file
        environ['PYTHONPATH'] = os.pathsep.join(
            [REPO] + [p for p in environ.get('PYTHONPATH', '').split(
                os.pathsep) if p])
        self.stack.extra.setdefault('agent', {})['roles'] = 'compute_node'
        conf = self.stack.config_file(HOST)
        proc = self.stack._spawn(HOST, [
            sys.executable, '-m',
            'tests.functional.compute_host.agent_on_host',
            '--config-file', conf], env=environ)
        deadline = time.monotonic() + timeout
        while self.logs().count(SERVING) <= before:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError('the agent of %s does not take '
                                     'requests:\n%s' % (HOST,
                                                        self.logs()[-4000:]))
            time.sleep(0.2)
        return proc

    def kill_agent(self):
        self.stack.kill(HOST)

    def logs(self, name=HOST):
        return '\n'.join(self.stack.log(name))

    def stop(self):
        try:
            self.stack.stop()
        finally:
            for path in (self.pause_file, self.pause_file + '.reached'):
                if os.path.exists(path):
                    os.unlink(path)
            self._drop()

    # ------------------------------------------------------------ API

    def wait_devices(self, timeout=180):
        """{block id: device} of the GPU pool, once the conductor's
        fabric sync has found the emulator's GPU blocks."""
        deadline = time.monotonic() + timeout
        while True:
            devices = self.admin.get('/devices?pool=%s' % POOL).json()[
                'devices']
            if len(devices) >= len(GPU_BLOCKS):
                return {d['address'].rsplit('/', 1)[1]: d for d in devices}
            if time.monotonic() > deadline:
                raise AssertionError('the fabric sync found %r' % devices)
            time.sleep(0.2)

    def gpu_lease(self, block_id='GPU0'):
        made = self.user.post('/leases', {
            'device_count': 1,
            'device_uuids': [self.devices[block_id]['uuid']]}, expect=201)
        return made.json()['uuid']

    def bind(self, uuid):
        self.user.post('/leases/%s/bind' % uuid, {'host': HOST}, expect=202)

    def unbind(self, uuid):
        self.user.post('/leases/%s/unbind' % uuid, {}, expect=202)

    def delete(self, uuid):
        self.user.delete('/leases/%s' % uuid, expect=204)

    def wait(self, uuid, statuses, timeout=300):
        return self.user.wait_lease(uuid, statuses, timeout=timeout)

    def actions(self, uuid):
        return self.user.get('/leases/%s/actions' % uuid).json()['actions']

    def attachment_address(self, uuid, block_id='GPU0'):
        """The host bus address the API shows for the lease's device."""
        device = self.admin.get('/devices/%s' % self.devices[block_id][
            'uuid']).json()
        return device.get('pci_address')
