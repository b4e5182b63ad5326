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

"""The cxl driver's bind_memory answers a locator.Locator: the serial the
host finds the memory device by, and the device's name."""

import pytest

from composable.common import exception
from composable.common import locator
from composable.fabric import cxl

FABRIC = {'name': 'cxl-fab', 'driver': 'cxl', 'driver_info': {
    'backend': 'local', 'devices': {'cmm0': {
        'serial': '0x5A5A0001', 'capacity_mb': 1024,
        'hosts': ['compute-0']}}}}


def test_bind_memory_answers_a_locator():
    driver = cxl.CxlFabricDriver()
    driver.validate_driver_info(FABRIC['driver_info'])
    found = driver.bind_memory(FABRIC, 'cmm0', {'name': 'compute-0'})
    assert isinstance(found, locator.Locator)
    assert (found.serial, found.fabric_ref) == ('0x5a5a0001', 'cmm0')
    # What an agent of the previous release reads of it.
    assert found.to_primitive()['serial'] == '0x5a5a0001'
    with pytest.raises(exception.DriverError):
        driver.bind_memory(FABRIC, 'cmm0', {'name': 'compute-1'})
