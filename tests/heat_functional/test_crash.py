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

"""heat-engine dies while it waits for a lease: after a restart, deleting
the stack still releases everything the stack had in composable."""

import os
import signal

from tests import waiting
from tests.heat_functional import test_stacks as helpers

# Seconds a lease or a stack resource may take to get somewhere on a busy
# machine.
DEADLINE = 300


def test_stack_delete_after_heat_engine_died_mid_create(cloud, tmp_path):
    user = cloud.user_client(helpers.USER)
    before = helpers._pools(user)
    name = helpers._stack_name('crash')
    template = helpers._template(tmp_path, name, {
        'gpu': {'gpu_count': 1, 'host': 'compute-0'}})
    agent = cloud.composable.procs['compute-0']
    # A stopped agent leaves the bind waiting in its queue: the lease
    # stays "binding", and the stack's create in progress, until the agent
    # runs again, however slow the machine.
    os.killpg(agent.pid, signal.SIGSTOP)
    agent_stopped = True
    engine_killed = False
    lease_id = None
    try:
        helpers.openstack(cloud, 'stack', 'create', '-t', template, name,
                          as_json=False)

        def binding_lease():
            res = helpers._resources(cloud, name).get('gpu', {})
            lease = res.get('physical_resource_id')
            if lease and user.get('/leases/%s' % lease).json()[
                    'status'] == 'binding':
                return lease
            return None
        lease_id = waiting.wait_until(binding_lease, DEADLINE,
                                      'the lease binding', interval=0.5)
        shown = helpers.openstack(cloud, 'stack', 'show', name)
        assert shown['stack_status'] == 'CREATE_IN_PROGRESS', shown

        cloud.heat.kill_engine()
        engine_killed = True
        os.killpg(agent.pid, signal.SIGCONT)
        agent_stopped = False
        # composable finishes what it was asked, with no engine watching.
        bound = user.wait_lease(lease_id, ('bound', 'bind_failed'),
                                timeout=DEADLINE)
        assert bound['status'] == 'bound', bound
        cloud.heat.start_engine()
        engine_killed = False

        helpers._delete_stack(cloud, name)
    finally:
        if agent_stopped:
            os.killpg(agent.pid, signal.SIGCONT)
        if engine_killed:
            cloud.heat.start_engine()
    lease = user.get('/leases/%s' % lease_id).json()
    assert lease['status'] == 'released', lease
    after = helpers._pools(user)
    assert after['gpu-pool']['used'] == before['gpu-pool']['used']
    # The device is free again (devices are the cloud admin's to list).
    leased = [d['uuid'] for d in bound['devices']]
    assert [d['state'] for d in cloud.admin_client().get(
        '/devices').json()['devices'] if d['uuid'] in leased] == [
            'available']
