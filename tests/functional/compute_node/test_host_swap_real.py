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

"""Host-mode swap with the real kernel, through the real oslo.privsep
daemon: mkswap, swapon -p, /proc/swaps, the swapoff memory check and
swapoff, on a loop device (the privileged functions accept block devices
only, as an iSCSI LUN is one).

The kernel iSCSI initiator cannot run on these machines, so in the full
attach/detach flow below iscsiadm is played by the recording runner (its
"login" makes the by-path link point at a loop device) while mkswap,
swapon and swapoff really run, as root, in the privsep daemon. Skipped
with the reason when this kernel or container does not allow swapon.
"""

import os
import subprocess
import uuid

import pytest

from composable.agent.compute_node import host_swap
from composable.common import exception
from tests.functional.compute_node import conftest as node_conftest
from tests.unit.agent.compute_node import fakes

SIZE_MB = 16
PRIORITY = 5


@pytest.fixture
def swap_file(swapon_allowed):
    path = node_conftest.make_swap_file()
    yield path
    node_conftest.swapoff_quietly(path)
    os.unlink(path)


@pytest.fixture
def loop_device(swap_file):
    proc = subprocess.run(['losetup', '--find', '--show', swap_file],
                          capture_output=True, text=True)
    if proc.returncode:
        pytest.skip('no loop device: %s' % proc.stderr.strip())
    dev = proc.stdout.strip()
    yield dev
    node_conftest.swapoff_quietly(dev)
    subprocess.run(['losetup', '-d', dev], check=False)


def _swap(**kw):
    kw.setdefault('priority', PRIORITY)
    kw.setdefault('headroom_mb', 0)
    # HostSwap's own default: every command through privsep.
    return host_swap.HostSwap(attach_timeout=10, detach_timeout=30, **kw)


def _entry(path):
    for entry in host_swap.read_swaps():
        if entry.filename == path:
            return entry
    return None


def test_swap_lifecycle_through_privsep(loop_device, privsep_daemon):
    swap = _swap()

    assert swap.enable_swap(loop_device) == loop_device

    entry = _entry(loop_device)
    assert entry is not None
    assert entry.type == 'partition'
    assert entry.priority == PRIORITY
    assert entry.size_kb == SIZE_MB * 1024 - 4
    # Again: nothing to do.
    swap.enable_swap(loop_device)
    assert [e.filename for e in host_swap.read_swaps()].count(
        loop_device) == 1

    assert swap.disable_swap(loop_device) is True
    assert _entry(loop_device) is None
    assert swap.disable_swap(loop_device) is False


def test_swapoff_refused_when_memory_is_short(loop_device, privsep_daemon,
                                              tmp_path):
    meminfo = tmp_path / 'meminfo'
    meminfo.write_text('MemTotal: 262144 kB\nMemAvailable: 1024 kB\n')
    short = _swap(headroom_mb=64, proc_meminfo=str(meminfo))
    short.enable_swap(loop_device)

    with pytest.raises(host_swap.SwapoffWouldNotFit) as info:
        short.disable_swap(loop_device)

    assert 'Refusing to swapoff %s' % loop_device in str(info.value)
    assert _entry(loop_device) is not None
    # With this host's real /proc/meminfo it fits.
    assert _swap(headroom_mb=64).disable_swap(loop_device) is True
    assert _entry(loop_device) is None


def test_privsep_refuses_what_is_not_a_free_block_device(
        swap_file, loop_device, privsep_daemon):
    runner = host_swap.PrivsepRunner()
    # A regular file: the privileged side never makes one swap.
    with pytest.raises(exception.DriverError) as info:
        runner(['mkswap', swap_file])
    assert 'not a device under /dev' in str(info.value)
    # Active swap is not wiped by a second mkswap.
    _swap().enable_swap(loop_device)
    with pytest.raises(exception.DriverError) as info:
        runner(['mkswap', loop_device])
    assert 'swap already' in str(info.value)
    assert _entry(loop_device) is not None
    # Nor is anything else iscsiadm can do than node records.
    with pytest.raises(exception.DriverError):
        runner(['iscsiadm', '-m', 'discovery', '-t', 'st', '-p',
                '192.0.2.1'])


class _HybridRunner(fakes.RecordingRunner):
    """iscsiadm is simulated; everything else really runs."""

    def __init__(self, host, device):
        super().__init__(host, make_devices=False)
        self.device = device
        self.real = host_swap.PrivsepRunner()

    def __call__(self, argv, ok_exit_codes=(0,), secrets=(), timeout=None):
        if argv[0] != 'iscsiadm':
            self.commands.append(list(argv))
            return self.real(argv, ok_exit_codes, secrets, timeout)
        result = super().__call__(argv, ok_exit_codes, secrets, timeout)
        if '--login' in argv:
            iqn = argv[argv.index('-T') + 1]
            portal = argv[argv.index('-p') + 1]
            link = os.path.join(self.host.by_path, 'ip-%s-iscsi-%s-lun-1'
                                % (portal, iqn))
            if not os.path.lexists(link):
                os.symlink(self.device, link)
        return result


def test_host_mode_attach_detach_on_a_loop_device(loop_device, tmp_path,
                                                  privsep_daemon):
    host = fakes.FakeHostState(tmp_path / 'host')
    runner = _HybridRunner(host, loop_device)
    swap = _swap(runner=runner, by_path_dir=host.by_path,
                 initiator_name_file=host.initiator_name_file)
    extent = {'uuid': str(uuid.uuid4()), 'index': 0, 'size_mb': SIZE_MB,
              'target_iqn': 'iqn.2010-10.org.openstack.composable:e1',
              'lun': 1, 'portal': '192.0.2.10:3260',
              'chap_username': 'u1', 'chap_secret': 's3cret-s3cret'}
    iqn = 'iqn.2010-10.org.openstack.composable:c1'

    details = swap.attach([extent], iqn)

    assert details[extent['uuid']]['swap_device'] == loop_device
    entry = _entry(loop_device)
    assert entry is not None and entry.type == 'partition'
    assert entry.priority == PRIORITY
    assert runner.names()[-3:] == ['iscsiadm --login', 'mkswap', 'swapon']

    swap.detach([extent])

    assert _entry(loop_device) is None
    assert runner.names()[-3:] == ['swapoff', 'iscsiadm --logout',
                                   'iscsiadm delete']
