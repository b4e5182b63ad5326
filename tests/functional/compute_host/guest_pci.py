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

"""The compute agent's HostPciDevices working on the compute host guest's
kernel: both what it reads of sysfs (the PCI module's functions) and what
it writes as root (composable.privsep.pci's) run inside the guest, each
call one ``pci.py <command>`` through guest-exec (guest_exec.PciRunner).

``SysfsInGuest`` stands for the PCI module as HostPciDevices sees it
(``host_pci.pci``): the functions that read sysfs run in the guest, the
pure ones (parsing, normalizing) and the exception classes are the
module's own. ``PrivilegedInGuest`` stands for composable.privsep.pci:
the same argument checks, then the command in the guest.
"""

import contextlib
import inspect

from composable.agent.compute_node import host_pci
from composable.agent.compute_node import pci
from composable.privsep import pci as priv_pci
from tests.functional.compute_host import guest_exec

# Functions of the PCI module that read the host's sysfs.
READERS = ('functions', 'host_checks', 'device_ids', 'driver',
           'iommu_group', 'group_members', 'check_group_isolated',
           'vfio_device_node', 'virtual_functions', 'read_serial')


def _raise_as_module(exc):
    """The PCI module's own exception for an error the guest printed, so
    that HostPciDevices handles it as it would the module's."""
    cls = getattr(pci, exc.error, None)
    if isinstance(cls, type) and issubclass(cls, pci.PciError):
        raise cls(exc.message)
    if exc.error == 'ValueError':
        raise ValueError(exc.message)
    if exc.error in ('OSError', 'FileNotFoundError', 'PermissionError'):
        raise OSError(exc.message)
    raise exc


def _call(runner, name, function, args, kwargs):
    bound = inspect.signature(function).bind(*args, **kwargs)
    arguments = {k: v for k, v in bound.arguments.items()
                 if k not in ('root', 'writer') and v is not None}
    try:
        return runner.call(name, **arguments)
    except guest_exec.PciCommandError as exc:
        _raise_as_module(exc)


class SysfsInGuest(object):

    def __init__(self, runner):
        self.runner = runner

    def __getattr__(self, name):
        real = getattr(pci, name)
        if name not in READERS:
            return real

        def remote(*args, **kwargs):
            return _call(self.runner, name, real, args, kwargs)
        return remote

    def exists(self, address, root='/'):
        return pci.normalize_address(address) in self.functions()

    def is_virtual_function(self, address, root='/'):
        address = pci.normalize_address(address)
        return self.runner.agent.shell(
            'test -e /sys/bus/pci/devices/%s/physfn && echo yes || true'
            % address).strip() == 'yes'


class PrivilegedInGuest(object):
    """composable.privsep.pci, its checks here and its work in the
    guest."""

    def __init__(self, runner):
        self.runner = runner

    def _run(self, name, **kwargs):
        try:
            return self.runner.call(name, **kwargs)
        except guest_exec.PciCommandError as exc:
            _raise_as_module(exc)

    def rescan(self):
        self._run('rescan')

    def find_function(self, locator, known, timeout=None,
                      interchangeable=1):
        locator = priv_pci.check_locator(locator)
        known = priv_pci._known(known)
        return self._run('find_function', locator=locator, known=known,
                         timeout=timeout or priv_pci.FIND_DEFAULT_TIMEOUT,
                         interval=0.2, interchangeable=interchangeable)

    def bind_vfio(self, address):
        return self._run('bind_vfio', address=priv_pci.check_address(address))

    def release(self, address):
        return self._run('release', address=priv_pci.check_address(address))

    def remove(self, address):
        return self._run('remove', address=priv_pci.check_address(address))

    def set_num_vfs(self, pf_address, count):
        priv_pci.check_count(count, 'the number of virtual functions', 0,
                             priv_pci.MAX_VFS)
        return self._run('set_num_vfs',
                         pf_address=priv_pci.check_address(pf_address),
                         count=count)


@contextlib.contextmanager
def host_pci_in_guest(runner, tmp_path, monkeypatch, find_timeout=60):
    """A HostPciDevices whose PCI work happens in the guest."""
    monkeypatch.setattr(host_pci, 'pci', SysfsInGuest(runner))
    yield host_pci.HostPciDevices(
        ops=PrivilegedInGuest(runner), root='/', find_timeout=find_timeout,
        nova_config_files=[str(tmp_path / 'nova.conf')],
        state_file=str(tmp_path / 'state' / 'pci-devices.json'))
