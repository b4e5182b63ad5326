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

"""The emulator's system backends, through the Redfish driver: a backend
is told of every composition and decomposition of its system, and what
it refuses fails cleanly. The backend here is an in-process recorder;
tests/functional/compute_host runs the libvirt one."""


import pytest

from composable.common import exception
from composable.fabric.redfish import driver as redfish_driver
from tests import waiting
from tests.functional.fabric import redfish_emulator as emu

HOST0 = {'name': 'compute-0', 'uuid': 'aaaaaaaa-0000-0000-0000-000000000000'}


class RecordingBackend(object):
    def __init__(self):
        self.calls = []
        self.refuse_compose = None
        self.refuse_decompose = None

    def compose(self, block_id, block):
        self.calls.append(('compose', block_id, block['serial']))
        if self.refuse_compose:
            raise RuntimeError(self.refuse_compose)

    def decompose(self, block_id, block):
        self.calls.append(('decompose', block_id, block['serial']))
        if self.refuse_decompose:
            raise RuntimeError(self.refuse_decompose)


@pytest.fixture
def setup(emulator):
    url, emulator_ = emulator
    backend = RecordingBackend()
    emulator_.set_backend('compute-0', backend)
    fabric = {'name': 'rack1', 'driver_info': {
        'address': url, 'username': 'admin',
        'password': emu.DEFAULT_CONFIG['password'], 'poll_interval': 0.05,
        'timeout': 15}}
    return (redfish_driver.RedfishFabricDriver(), fabric, emulator_,
            backend)


def _device(block_id):
    return {'uuid': 'dev-' + block_id, 'address': emu.BLOCKS + '/' + block_id}


def _state(emulator, block_id):
    with emulator.locked() as state:
        block = state.blocks[block_id]
        return block['state'], block['system'], block['message']


def test_backend_composes_and_decomposes(setup):
    driver, fabric, emulator, backend = setup
    locator = driver.bind_device(fabric, _device('GPU0'), HOST0)
    assert locator.serial == 'GPU-SN-0000'
    assert backend.calls == [('compose', 'GPU0', 'GPU-SN-0000')]
    driver.unbind_device(fabric, _device('GPU0'), HOST0)
    assert backend.calls[1:] == [('decompose', 'GPU0', 'GPU-SN-0000')]
    assert _state(emulator, 'GPU0')[:2] == ('Unused', None)
    # Another system's blocks do not reach this backend.
    emulator.set_backend('compute-0', None)
    driver.bind_device(fabric, _device('GPU0'), HOST0)
    assert len(backend.calls) == 2


def test_refused_composition_fails_the_block(setup):
    driver, fabric, emulator, backend = setup
    backend.refuse_compose = 'no free PCIe hot-plug slot'
    with pytest.raises(exception.DriverError):
        driver.bind_device(fabric, _device('GPU0'), HOST0)
    state, _, message = _state(emulator, 'GPU0')
    assert state == 'Failed'
    assert message == ('The system did not take the device: no free PCIe '
                       'hot-plug slot')
    # Taking it back out is allowed and the block is usable again.
    driver.unbind_device(fabric, _device('GPU0'), HOST0)
    assert _state(emulator, 'GPU0')[1] is None
    waiting.wait_until(lambda: _state(emulator, 'GPU0')[0] == 'Unused', 15,
                       'the removed block to become Unused')
    backend.refuse_compose = None
    driver.bind_device(fabric, _device('GPU0'), HOST0)
    assert _state(emulator, 'GPU0')[:2] == ('Composed', 'compute-0')


def test_refused_decomposition_changes_nothing(setup):
    driver, fabric, emulator, backend = setup
    driver.bind_device(fabric, _device('GPU0'), HOST0)
    backend.refuse_decompose = 'no DEVICE_DELETED within 60 s'
    with pytest.raises(exception.DriverError) as failed:
        driver.unbind_device(fabric, _device('GPU0'), HOST0)
    assert 'no DEVICE_DELETED within 60 s' in str(failed.value)
    assert _state(emulator, 'GPU0')[:2] == ('Composed', 'compute-0')
    backend.refuse_decompose = None
    driver.unbind_device(fabric, _device('GPU0'), HOST0)
    assert _state(emulator, 'GPU0')[:2] == ('Unused', None)
