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

"""The compute host guest's PCI bus, as the bus of a HostPciDevices that
runs outside the guest: test infrastructure standing in for "the agent
runs on that host".

A composable-agent on a real compute node works on its own sysfs
(composable.agent.compute_node.host_pci.SysfsPci). Here the agent runs on
the test machine and the "host" is the q35 TCG guest the Redfish emulator
hot-plugs functions into, so each method of the bus is one run of the
agent's stdlib-only PCI module inside the guest through the QEMU guest
agent (guest_exec.PciRunner). The module's errors come back by their
code (pci_sysfs.ErrorCode) as the PciError HostPciDevices expects of
SysfsPci, and an attach's answer as a locator.AttachResult.

Fault injection for the tests (a file the test process creates):
``pause_file`` makes attach_function wait, before it runs anything in
the guest, until the file is removed -- writing ``<pause_file>.reached``
first -- so that a test can kill the agent after the fabric composed the
device and before the host bound it.
"""

import os
import time

from oslo_log import log as logging

from composable.common import locator as locator_mod
from composable.privsep import pci_sysfs as pci
from tests.functional.compute_host import guest_exec

# How often the module in the guest rescans while it waits for a
# function: hot-plugged functions usually show up through pciehp without
# a rescan, within half a second.
FIND_INTERVAL = 0.1

LOG = logging.getLogger(__name__)


def _exception(exc):
    """The error the PCI module reported in the guest, by its code."""
    return pci.PciError(exc.error, exc.message)


class GuestPciBus(object):
    """SysfsPci's methods, run inside the compute host guest."""

    def __init__(self, runner, pause_file=None):
        self.runner = runner
        self.pause_file = pause_file
        self.calls = []

    def _call(self, command, **kwargs):
        self.calls.append(command)
        started = time.monotonic()
        try:
            return self._run(command, **kwargs)
        finally:
            # What the benchmark's breakdown reads.
            LOG.info('PCI module %(command)s in the compute host guest: '
                     '%(ms).0f ms', {'command': command, 'ms': (
                         time.monotonic() - started) * 1000})

    def _run(self, command, **kwargs):
        try:
            try:
                return self.runner.call(command, **kwargs)
            except guest_exec.CommandTimeout:
                raise
            except guest_exec.AgentError:
                # The guest may have restarted since the module was copied
                # in (its /tmp is gone): copy it again and try once more.
                self.runner.forget()
                return self.runner.call(command, **kwargs)
        except guest_exec.PciCommandError as exc:
            raise _exception(exc)
        except guest_exec.AgentError as exc:
            raise OSError('the compute host guest did not run the PCI '
                          'module: %s' % exc)

    def _pause(self):
        if not self.pause_file or not os.path.exists(self.pause_file):
            return
        with open(self.pause_file + '.reached', 'w') as f:
            f.write(str(os.getpid()))
        while os.path.exists(self.pause_file):
            time.sleep(0.05)

    def functions(self):
        return self._call('functions')

    def boot_id(self):
        return self._call('boot_id')

    def host_checks(self, kernel_release=None):
        if kernel_release:
            return self._call('host_checks', kernel_release=kernel_release)
        return self._call('host_checks')

    def attach_function(self, locator, known, timeout, interchangeable,
                        recorded=None, nova_conf_text=None):
        self._pause()
        kwargs = {'locator': locator.to_primitive(), 'known': list(known),
                  'timeout': timeout, 'interval': FIND_INTERVAL,
                  'interchangeable': interchangeable}
        if recorded:
            kwargs['recorded'] = recorded
        if nova_conf_text:
            kwargs['nova_conf_text'] = nova_conf_text
        return locator_mod.AttachResult.from_primitive(
            self._call('attach_function', **kwargs))

    def detach_function(self, address, vendor_id, product_id):
        return self._call('detach_function', address=address,
                          vendor_id=vendor_id, product_id=product_id)

    def exists(self, address):
        return self._call('exists', address=address)

    def is_virtual_function(self, address):
        return self._call('is_virtual_function', address=address)

    def release(self, address):
        return self._call('release', address=address)

    def detach_unrecorded_function(self, locator, known, interchangeable):
        return self._call('detach_unrecorded_function',
                          locator=locator.to_primitive(),
                          known=list(known),
                          interchangeable=interchangeable)

    def virtual_functions(self, pf_address):
        return self._call('virtual_functions', pf_address=pf_address)

    def set_num_vfs(self, pf_address, count):
        return self._call('set_num_vfs', pf_address=pf_address,
                          count=count)

    def describe_functions(self, addresses):
        return self._call('describe_functions', addresses=list(addresses))
