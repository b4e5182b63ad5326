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

"""GPU leases end to end through the API onto the compute host guest.

composable-api, -conductor and -agent run as real processes (RabbitMQ,
MariaDB); the fabric is the project's Redfish emulator, whose system
``compute-host`` is the q35 TCG guest it hot-plugs functions into; the
agent's PCI work runs inside that guest through its guest agent
(agent_on_host: test infrastructure standing in for an agent on that
host). What cannot run here is handing the function on to an instance of
the host (VFIO device assignment needs nested VFIO): the tests stop at
vfio-pci and /dev/vfio/<group> in the host.

After each test nothing may stay composed into the host without a live
lease, and the lease's fault and action log say what happened.
"""

import os

import pytest

from tests import waiting
from tests.functional.compute_host import image as image_mod
from tests.functional.compute_host import services as services_mod
from tests.functional.compute_host import stack as host_stack
from tests.functional.compute_node import dataplane
from tests.functional.guest import build

BOOT_TIMEOUT = 300
LEASE_TIMEOUT = 300


@pytest.fixture(scope='module')
def host(libvirt_conn):
    """The compute host guest (conftest's), one that boots again after a
    reset instead of stopping: a host rebooted under a bound lease."""
    import libvirt
    try:
        image = image_mod.build_image()
    except build.GuestUnavailable as exc:
        dataplane.unavailable(str(exc))
    cm = image_mod.running_host(libvirt_conn, image=image,
                                on_reboot='restart')
    try:
        running = cm.__enter__()
    except libvirt.libvirtError as exc:
        dataplane.unavailable('QEMU (TCG) could not start the compute host '
                              'guest: %s' % exc)
    try:
        yield running
    finally:
        cm.__exit__(None, None, None)


@pytest.fixture(scope='module')
def services(host, tmp_path_factory):
    with host_stack.fabric(host) as fabric:
        running = services_mod.HostServices(
            tmp_path_factory.mktemp('host-e2e'), host, fabric)
        try:
            running.start()
            yield running
        finally:
            running.stop()


@pytest.fixture
def e2e(services, pci):
    """The services; every lease a test leaves is deleted after it, and
    nothing may stay composed into the host then."""
    try:
        yield services
    finally:
        if os.path.exists(services.pause_file):
            os.unlink(services.pause_file)
        if services.stack.procs.get(services_mod.HOST) is None or \
                services.stack.procs[services_mod.HOST].poll() is not None:
            services.start_agent()
        leases = services.user.get('/leases').json()['leases']
        for lease in leases:
            if lease['status'] in ('released',):
                continue
            if lease['status'] in ('bound',):
                services.unbind(lease['uuid'])
                services.wait(lease['uuid'], ['reserved', 'error'])
            services.user.delete('/leases/%s' % lease['uuid'],
                                 expect=None)
        for lease in leases:
            services.wait(lease['uuid'], ['released'], timeout=LEASE_TIMEOUT)
        waiting.wait_until(lambda: not services.fabric.composed(), 120,
                           'nothing composed into the host')


def _composed(services, block_id='GPU0'):
    return services.fabric.state(block_id)[:2] == (
        'Composed', host_stack.SYSTEM_ID)


def _unused(services, block_id='GPU0'):
    return services.fabric.state(block_id)[:2] == ('Unused', None)


def test_gpu_lease_bound_unbound_and_deleted_through_the_api(
        e2e, pci, agent):
    known = pci.call('functions')
    uuid = e2e.gpu_lease()
    e2e.bind(uuid)
    lease = e2e.wait(uuid, ['bound', 'bind_failed'], LEASE_TIMEOUT)
    assert lease['status'] == 'bound', lease.get('fault')
    assert _composed(e2e)

    # The function the fabric composed is in the host, on vfio-pci.
    address = e2e.attachment_address(uuid)
    assert address and address not in known
    assert pci.call('device_ids', address=address) == ['1234', '11e8']
    assert pci.call('driver', address=address) == 'vfio-pci'
    group = pci.call('iommu_group', address=address)
    assert agent.shell('test -c /dev/vfio/%s && cat /sys/bus/pci/devices/'
                       '%s/driver_override' % (group, address)).strip() == (
        'vfio-pci')

    # Unbind: off the host's bus first, then off the fabric. The check
    # runs when the fabric is asked to remove the block.
    seen_at_remove = []

    def at_remove(record):
        if record['method'] == 'POST' and \
                'RemoveResourceBlock' in record['path']:
            seen_at_remove.append(address in pci.call('functions'))
    e2e.fabric.emulator.observe(at_remove)
    try:
        e2e.unbind(uuid)
        lease = e2e.wait(uuid, ['reserved', 'error'], LEASE_TIMEOUT)
    finally:
        e2e.fabric.emulator._observers.remove(at_remove)
    assert lease['status'] == 'reserved', lease.get('fault')
    assert seen_at_remove and not any(seen_at_remove)
    assert _unused(e2e)
    assert address not in pci.call('functions')
    assert not e2e.fabric.backend.plugged

    e2e.delete(uuid)
    assert e2e.wait(uuid, ['released', 'error'])['status'] == 'released'
    assert _unused(e2e)
    assert [a['action'] for a in e2e.actions(uuid)][:3] == [
        'create', 'bind', 'unbind']


def _observe_removals(e2e, pci, known):
    """The new functions still on the host's bus each time the fabric is
    asked to remove a block (RemoveResourceBlock): a list to read, and
    the observer to take away."""
    seen = []

    def at_remove(record):
        if record['method'] == 'POST' and \
                'RemoveResourceBlock' in record['path']:
            seen.append(sorted(set(pci.call('functions')) - set(known)))
    e2e.fabric.emulator.observe(at_remove)
    return seen, at_remove


def test_agent_killed_after_the_fabric_bind(e2e, pci):
    """The agent dies after the fabric composed the device and before the
    host bound it: the bind fails when the conductor's wait ends, the
    failed bind is undone -- the restarted agent, which holds no record
    of the function that appeared while it was dead, finds it by the
    device's locator and removes it from the host before the fabric
    unbinds it (the block goes back to Unused) -- and once the agent is
    back the lease binds."""
    known = pci.call('functions')
    uuid = e2e.gpu_lease()
    with open(e2e.pause_file, 'w'):
        pass
    e2e.bind(uuid)
    waiting.wait_until(
        lambda: os.path.exists(e2e.pause_file + '.reached'), LEASE_TIMEOUT,
        'the agent reaching the host side of the attach')
    assert _composed(e2e)
    e2e.kill_agent()
    os.unlink(e2e.pause_file)
    os.unlink(e2e.pause_file + '.reached')
    # The function the fabric hot-plugged is on the host, with no record.
    waiting.wait_until(lambda: set(pci.call('functions')) - set(known), 120,
                       'the composed function on the host')
    seen_at_remove, at_remove = _observe_removals(e2e, pci, known)
    try:
        e2e.start_agent()
        lease = e2e.wait(uuid, ['bound', 'bind_failed'], LEASE_TIMEOUT)
        waiting.wait_until(lambda: _unused(e2e), 120, 'the block Unused again')
    finally:
        e2e.fabric.emulator._observers.remove(at_remove)
    # Off the host's bus before the fabric was asked to unplug it.
    assert seen_at_remove and seen_at_remove == [[]] * len(seen_at_remove)
    assert 'which appeared with no record on this host, is off the ' \
        'host\'s bus' in e2e.logs()
    assert lease['status'] == 'bind_failed'
    assert services_mod.HOST in lease['fault']
    bind = [a for a in e2e.actions(uuid) if a['action'] == 'bind'][-1]
    assert bind['result'] == 'error' and bind['message']
    # Nothing stays composed for a lease that is not bound, and the
    # function the fabric hot-plugged is gone from the host.
    waiting.wait_until(lambda: _unused(e2e), 120, 'the block Unused again')
    waiting.wait_until(lambda: set(pci.call('functions')) <= set(known), 120,
                       'the function gone from the host')
    assert not e2e.fabric.backend.plugged

    e2e.bind(uuid)
    lease = e2e.wait(uuid, ['bound', 'bind_failed'], LEASE_TIMEOUT)
    assert lease['status'] == 'bound', lease.get('fault')
    address = e2e.attachment_address(uuid)
    assert pci.call('driver', address=address) == 'vfio-pci'
    e2e.delete(uuid)
    assert e2e.wait(uuid, ['released', 'error'])['status'] == 'released'
    assert _unused(e2e)
    assert address not in pci.call('functions')


def test_host_rebooted_while_a_device_is_bound(e2e, host, pci, agent):
    """The host guest restarts (a hard reset) while its GPU lease is
    bound. The fabric keeps the device composed, the host enumerates it
    again without vfio-pci; its agent, restarted with the host, binds
    it again. The lease then unbinds and releases cleanly."""
    uuid = e2e.gpu_lease()
    e2e.bind(uuid)
    lease = e2e.wait(uuid, ['bound', 'bind_failed'], LEASE_TIMEOUT)
    assert lease['status'] == 'bound', lease.get('fault')
    address = e2e.attachment_address(uuid)
    assert pci.call('driver', address=address) == 'vfio-pci'

    e2e.kill_agent()
    mark = host.mark()
    host.domain.reset(0)
    host.wait_for_line('^booted$', BOOT_TIMEOUT, 'the boot after the reset',
                       since=mark)
    waiting.wait_until(lambda: _agent_answers(agent), BOOT_TIMEOUT,
                       'the guest agent after the reset')
    pci.forget()
    assert address in pci.call('functions')
    assert pci.call('driver', address=address) != 'vfio-pci'
    assert _composed(e2e)

    e2e.start_agent()
    waiting.wait_until(
        lambda: pci.call('driver', address=address) == 'vfio-pci',
        LEASE_TIMEOUT, 'the function on vfio-pci again')
    assert 'is on vfio-pci again' in e2e.logs()
    # The lease says what happened (the agent's report is a cast).
    restore = waiting.wait_until(
        lambda: [a for a in e2e.actions(uuid) if a['action'] == 'restore'],
        LEASE_TIMEOUT, 'the restore action on the lease')
    assert [a['result'] for a in restore] == ['success'], restore
    assert address in restore[0]['message']
    assert 'restarted' in restore[0]['message']
    lease = e2e.user.get('/leases/%s' % uuid).json()
    assert lease['status'] == 'bound' and lease['fault'] is None

    e2e.unbind(uuid)
    lease = e2e.wait(uuid, ['reserved', 'error'], LEASE_TIMEOUT)
    assert lease['status'] == 'reserved', lease.get('fault')
    assert address not in pci.call('functions')
    assert _unused(e2e)
    e2e.delete(uuid)
    assert e2e.wait(uuid, ['released', 'error'])['status'] == 'released'


def _agent_answers(agent):
    from tests.functional.compute_host import guest_exec
    try:
        agent.command('guest-ping', timeout=5)
        return True
    except guest_exec.AgentError:
        return False


def test_function_sharing_its_iommu_group_with_a_host_device(e2e, pci):
    """GPU1's slot also holds a function the host drives (an NVMe
    controller on the nvme driver): passing the group through would hand
    it to the guest. The bind fails with a fault that says so, nothing is
    bound to vfio-pci, and the block goes back to Unused."""
    known = pci.call('functions')
    uuid = e2e.gpu_lease('GPU1')
    e2e.bind(uuid)
    lease = e2e.wait(uuid, ['bound', 'bind_failed'], LEASE_TIMEOUT)
    assert lease['status'] == 'bind_failed'
    fault = lease['fault']
    assert 'cannot be passed through' in fault, fault
    assert 'also holds' in fault and 'on driver nvme' in fault, fault
    waiting.wait_until(lambda: _unused(e2e, 'GPU1'), 120, 'GPU1 Unused again')
    waiting.wait_until(lambda: set(pci.call('functions')) <= set(known), 120,
                       'the slot gone from the host')
    assert 'vfio-pci' not in [pci.call('driver', address=a)
                              for a in pci.call('functions')]
    e2e.delete(uuid)
    assert e2e.wait(uuid, ['released', 'error'])['status'] == 'released'
