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

"""A Redfish fabric whose system ``compute-host`` is the compute host
guest: the project's emulator with a DomainHotplug backend, driven by the
project's Redfish driver. Shared by the tests and tools/bench/
device_bind.py."""

import contextlib

from composable.fabric.redfish import driver as redfish_driver
from tests.functional.compute_host import hotplug
from tests.functional.fabric import redfish_emulator as emu

SYSTEM_ID = 'compute-host'
HOST = {'name': 'compute-host',
        'uuid': 'bbbbbbbb-0000-0000-0000-000000000000'}
PASSWORD = 'redfish-secret'

# The blocks' ids are those of the QEMU functions that stand for them
# (hotplug.MODELS); the NVMe serial becomes the controller's.
CONFIG = {
    'username': 'admin', 'password': PASSWORD, 'compose_delay': 0.05,
    'zones': [{'id': '1', 'name': 'Test rack'}],
    'systems': [{'id': SYSTEM_ID, 'name': SYSTEM_ID, 'zones': ['1']}],
    'blocks': [
        {'id': 'GPU0', 'kind': 'gpu', 'vendor_id': '1234',
         'device_id': '11e8', 'serial': 'EDU-SN-0000',
         'model': 'QEMU edu', 'manufacturer': 'QEMU', 'zones': ['1']},
        {'id': 'NVMe0', 'kind': 'nvme', 'vendor_id': '1b36',
         'device_id': '0010', 'serial': 'NVME-SN-0000',
         'model': 'QEMU NVMe Ctrl', 'manufacturer': 'QEMU',
         'zones': ['1']},
        # A "GPU" sharing its slot (and so its IOMMU group) with a
        # function the host drives (hotplug's companion).
        {'id': 'GPU1', 'kind': 'gpu', 'vendor_id': '1234',
         'device_id': '11e8', 'serial': 'EDU-SN-0001',
         'model': 'QEMU edu', 'manufacturer': 'QEMU', 'zones': ['1'],
         'companion': 'nvme'},
        # Ids no emulated function has: the backend refuses it.
        {'id': 'GPU9', 'kind': 'gpu', 'vendor_id': '10de',
         'device_id': '2330', 'serial': 'GPU-SN-0009',
         'model': 'H100 80GB', 'manufacturer': 'NVIDIA', 'zones': ['1']},
    ],
}


def device(block_id):
    return {'uuid': 'dev-' + block_id, 'address': emu.BLOCKS + '/' + block_id}


class Fabric(object):
    """Composes the emulator's blocks into the host guest."""

    def __init__(self, driver, info, emulator, backend):
        self.driver = driver
        self.info = info
        self.emulator = emulator
        self.backend = backend

    def bind(self, block_id):
        """Compose the block into the host: its locator (a
        composable.common.locator.Locator)."""
        return self.driver.bind_device(self.info, device(block_id), HOST)

    def unbind(self, block_id):
        self.driver.unbind_device(self.info, device(block_id), HOST)

    def state(self, block_id):
        """(state, system, message) of a block."""
        with self.emulator.locked() as state:
            block = state.blocks[block_id]
            return block['state'], block['system'], block['message']

    def composed(self):
        with self.emulator.locked() as state:
            return [b for b in state.systems[SYSTEM_ID]['blocks']
                    if state.blocks[b]['kind'] != 'compute']

    def decompose_all(self):
        for block_id in self.composed():
            self.unbind(block_id)


@contextlib.contextmanager
def fabric(host, config=None):
    """A Fabric composing into ``host`` (a RunningHost); stopped, with
    every function it plugged unplugged, afterwards."""
    url, stop, emulator = emu.serve(config=config or CONFIG)
    try:
        backend = hotplug.DomainHotplug(host.uuid)
    except Exception:
        stop()
        raise
    emulator.set_backend(SYSTEM_ID, backend)
    info = {'name': 'rack', 'driver_info': {
        'address': url, 'username': 'admin', 'password': PASSWORD,
        'system_map': {HOST['name']: emu.SYSTEMS + '/' + SYSTEM_ID},
        'poll_interval': 0.05, 'timeout': 120}}
    try:
        yield Fabric(redfish_driver.RedfishFabricDriver(), info, emulator,
                     backend)
    finally:
        emulator.set_backend(SYSTEM_ID, None)
        try:
            for block_id in list(backend.plugged):
                try:
                    backend.decompose(block_id)
                except hotplug.HotplugError:
                    pass  # the domain is destroyed next anyway
        finally:
            backend.close()
            stop()
