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

"""Host-mode leases that grow and shrink, with the real kernel's swap.

The kernel iSCSI initiator cannot run on these machines, so iscsiadm is
played by a recording runner whose "login" makes the extent's by-path
link point at a loop device of its own; mkswap, swapon -p and swapoff
really run, as root, in the privsep daemon, and the usage sampler reads
the real /proc/swaps. Skipped with the reason when this kernel or
container does not allow swapon or loop devices.
"""

import os
import subprocess
import uuid

import pytest

from composable.agent.compute_node import host_swap
from composable.agent.compute_node import usage
from composable.agent import manager
from composable import conf
from tests.functional.compute_node import dataplane
from tests.functional.compute_node import conftest as node_conftest
from tests.unit.agent.compute_node import fakes

INITIATOR = 'iqn.2010-10.org.openstack.composable:c1'
PRIORITY = 6
SIZE_MB = node_conftest.SWAP_FILE_MB


@pytest.fixture
def loop_devices(swapon_allowed):
    """Two loop devices over swap files of their own; gone afterwards,
    swap or not."""
    made = []
    try:
        for _ in range(2):
            path = node_conftest.make_swap_file()
            proc = subprocess.run(['losetup', '--find', '--show', path],
                                  capture_output=True, text=True)
            if proc.returncode:
                os.unlink(path)
                dataplane.unavailable('no loop device: %s'
                                      % proc.stderr.strip())
            made.append((proc.stdout.strip(), path))
        yield [dev for dev, _path in made]
    finally:
        for dev, path in made:
            node_conftest.swapoff_quietly(dev)
            subprocess.run(['losetup', '-d', dev], check=False)
            os.unlink(path)


class _LoopRunner(fakes.RecordingRunner):
    """iscsiadm is simulated, each target's "LUN" a loop device of its
    own; everything else really runs through privsep."""

    def __init__(self, host, devices):
        super().__init__(host, make_devices=False)
        self.devices = list(devices)
        self.by_target = {}
        self.real = host_swap.PrivsepRunner()

    def __call__(self, argv, ok_exit_codes=(0,), secrets=(), timeout=None):
        if argv[0] != 'iscsiadm':
            self.commands.append(list(argv))
            return self.real(argv, ok_exit_codes, secrets, timeout)
        result = super().__call__(argv, ok_exit_codes, secrets, timeout)
        if '--login' in argv:
            iqn = argv[argv.index('-T') + 1]
            portal = argv[argv.index('-p') + 1]
            device = self.by_target.setdefault(iqn, self.devices.pop(0))
            link = os.path.join(self.host.by_path, 'ip-%s-iscsi-%s-lun-1'
                                % (portal, iqn))
            if not os.path.lexists(link):
                os.symlink(device, link)
        return result


def _extent(n):
    return {'uuid': str(uuid.uuid4()), 'index': n, 'size_mb': SIZE_MB,
            'target_iqn': 'iqn.2010-10.org.openstack.composable:x%d' % n,
            'lun': 1, 'portal': '192.0.2.10:3260',
            'chap_username': 'u%d' % n, 'chap_secret': 's3cret-%d-x' % n}


def _entries():
    return {e.filename: e for e in host_swap.read_swaps()}


@pytest.fixture
def agent(loop_devices, privsep_daemon, tmp_path):
    conf.CONF.set_override('memory_exporter', 'tgt', 'agent')
    conf.CONF.set_override('initiator_iqn', INITIATOR, 'compute_node')
    host = fakes.FakeHostState(tmp_path / 'host', initiator_iqn=INITIATOR)
    runner = _LoopRunner(host, loop_devices)
    swap = host_swap.HostSwap(
        runner=runner, priority=PRIORITY, headroom_mb=0,
        by_path_dir=host.by_path,
        initiator_name_file=host.initiator_name_file, attach_timeout=10,
        detach_timeout=30)
    agent = manager.AgentManager('compute-0', ['compute_node'],
                                 guest_attacher=object(), host_swap=swap)
    agent.runner = runner
    yield agent
    conf.CONF.clear_override('memory_exporter', 'agent')
    conf.CONF.clear_override('initiator_iqn', 'compute_node')


def test_grow_and_shrink_with_real_swap(agent, loop_devices):
    lease = {'uuid': str(uuid.uuid4())}
    first, second = _extent(1), _extent(2)
    sampler = usage.UsageSampler(agent, conductor=object(), interval=1,
                                 timeout=5)

    agent.compute.attach_memory(None, lease, [first], 'host')
    [sample] = sampler.sample()
    assert sample['size_mb'] == SIZE_MB
    assert 0 <= sample['used_mb'] <= SIZE_MB

    grown = agent.compute.attach_memory(None, lease, [second], 'host')

    assert list(grown) == [second['uuid']]
    entries = _entries()
    assert set(loop_devices) <= set(entries)
    # Both at the lease's priority, so the kernel stripes over them.
    assert {entries[d].priority for d in loop_devices} == {PRIORITY}
    [sample] = sampler.sample()
    assert sample['size_mb'] == 2 * SIZE_MB

    agent.compute.detach_memory(None, lease, [second], 'host')

    entries = _entries()
    second_dev = grown[second['uuid']]['swap_device']
    first_dev = agent.memory_attachments[lease['uuid']][first['uuid']][
        'swap_device']
    assert second_dev not in entries
    assert first_dev in entries
    [sample] = sampler.sample()
    assert sample['size_mb'] == SIZE_MB

    agent.compute.detach_memory(None, lease, [first], 'host')

    assert not set(loop_devices) & set(_entries())
    assert agent.memory_attachments == {}
    assert sampler.sample() == []
