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

import time

import pytest

from composable.common import exception
from composable.common import locator
from composable import conf
from composable import fabric as fabric_drivers
from composable.fabric import fake

CONF = conf.CONF

FABRIC = {'name': 'fab', 'driver': 'fake', 'driver_info': {}}
HOST = {'name': 'compute-0'}
DEVICE = {'uuid': 'd1', 'address': 'fake-gpu-0'}


@pytest.fixture(autouse=True)
def clean():
    fake.FakeFabricDriver.reset()
    fabric_drivers.reset()
    yield
    fake.FakeFabricDriver.reset()
    fabric_drivers.reset()
    CONF.clear_override('enabled_drivers', 'fabric')


def test_loaded_by_entry_point_and_says_simulated(caplog):
    driver = fabric_drivers.get_driver('fake')
    assert isinstance(driver, fake.FakeFabricDriver)
    assert driver.simulated
    assert 'SIMULATED fabric: no hardware is touched' in caplog.text


def test_disabled_driver_is_refused():
    CONF.set_override('enabled_drivers', ['other'], 'fabric')
    with pytest.raises(exception.DriverError) as info:
        fabric_drivers.get_driver('fake')
    assert 'enabled_drivers' in info.value.message


def test_bind_is_deterministic_and_idempotent():
    driver = fake.FakeFabricDriver()
    first = driver.bind_device(FABRIC, DEVICE, HOST)
    assert first == driver.bind_device(FABRIC, DEVICE, HOST)
    assert isinstance(first, locator.Locator)
    assert set(first.to_primitive()) == set(locator.Locator.FIELDS)
    assert first.fabric_ref == DEVICE['address']
    address = first.pci_address
    assert address.startswith('0000:') and address.endswith('.0')
    other = dict(DEVICE, address='fake-gpu-1')
    assert driver.bind_device(FABRIC, other, HOST).pci_address != address
    assert len(driver.bindings()) == 2
    driver.unbind_device(FABRIC, DEVICE, HOST)
    driver.unbind_device(FABRIC, DEVICE, HOST)
    assert list(driver.bindings().values()) == ['compute-0']


def test_device_bound_elsewhere_is_refused():
    driver = fake.FakeFabricDriver()
    driver.bind_device(FABRIC, DEVICE, HOST)
    with pytest.raises(exception.DriverError):
        driver.bind_device(FABRIC, DEVICE, {'name': 'compute-1'})


def test_injected_failure_and_delay():
    driver = fake.FakeFabricDriver()
    failing = dict(FABRIC, driver_info={'simulate_failure': 'bind'})
    with pytest.raises(exception.DriverError):
        driver.bind_device(failing, DEVICE, HOST)
    driver.unbind_device(failing, DEVICE, HOST)
    slow = dict(FABRIC, driver_info={'simulate_delay': 0.2})
    start = time.monotonic()
    driver.bind_device(slow, DEVICE, HOST)
    assert time.monotonic() - start >= 0.2


def test_discover_lists_the_inventory_and_who_holds_what():
    driver = fake.FakeFabricDriver()
    fabric = dict(FABRIC, driver_info={'inventory': [
        {'address': DEVICE['address'], 'kind': 'gpu', 'model': 'A100',
         'serial': 'S1'},
        {'address': 'fake-nvme-0', 'kind': 'nvme', 'health': 'critical'}]})
    driver.bind_device(fabric, DEVICE, HOST)
    found = {d['address']: d for d in driver.discover(fabric)}
    assert found[DEVICE['address']]['bound_to'] == 'compute-0'
    assert found[DEVICE['address']]['serial'] == 'S1'
    assert found['fake-nvme-0']['bound_to'] is None
    assert found['fake-nvme-0']['health'] == 'critical'
    # No inventory simulated: the driver cannot tell (None), which is
    # not an empty fabric (an empty list).
    assert driver.discover(FABRIC) is None
    assert driver.discover(dict(FABRIC, driver_info={'inventory': []})) == []


@pytest.mark.parametrize('info', [
    {'simulate_delay': -1}, {'simulate_delay': 'x'},
    {'simulate_failure': 'sometimes'}, {'inventory': 'gpu0'},
    {'inventory': [{'kind': 'gpu'}]},
    {'inventory': [{'address': 'a', 'kind': 'tpu'}]},
    {'inventory': [{'address': 'a', 'health': 'meh'}]},
    {'inventory': [{'address': 'a', 'colour': 'red'}]},
    {'inventory': [{'address': 'a'}, {'address': 'a'}]}])
def test_validate_driver_info_refuses(info):
    with pytest.raises(exception.Invalid):
        fake.FakeFabricDriver().validate_driver_info(info)


def test_validate_driver_info_accepts():
    fake.FakeFabricDriver().validate_driver_info(
        {'simulate_delay': 1.5, 'simulate_failure': True})
    fake.FakeFabricDriver().validate_driver_info({})
