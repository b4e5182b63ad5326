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

"""The redfish driver against a served Redfish mockup (optional).

DMTF publishes mockups of real services (the ``mockups`` folder of its
Redfish-Publications repository: public-cxl, public-cxl-multiswitch,
public-composability, ...) and a server for them (Redfish-Mockup-Server).
Neither is part of this project. To run these tests, serve a mockup and
point ``COMPOSABLE_REDFISH_MOCKUP_URL`` at it::

    python3 redfishMockupServer.py -S -D .../mockups/public-cxl -p 8000
    python3 tools/redfish-mockup-state.py --upstream http://127.0.0.1:8000 \\
        --port 8001
    COMPOSABLE_REDFISH_MOCKUP_URL=http://127.0.0.1:8001 \\
    COMPOSABLE_REDFISH_MOCKUP_STATEFUL=1 pytest .../test_redfish_mockups.py

The mockup server changes nothing when asked to; with
``COMPOSABLE_REDFISH_MOCKUP_STATEFUL`` (the URL then being that of
tools/redfish-mockup-state.py in front of it) a device the mockup shows
given to a host is taken from it and given back.
"""

import os

import pytest

from composable.fabric import base
from composable.fabric.redfish import driver as redfish_driver
from tests.functional.fabric import root_reads as reads

URL = os.environ.get('COMPOSABLE_REDFISH_MOCKUP_URL')
STATEFUL = bool(os.environ.get('COMPOSABLE_REDFISH_MOCKUP_STATEFUL'))

pytestmark = pytest.mark.skipif(
    not URL, reason='set COMPOSABLE_REDFISH_MOCKUP_URL to the URL of a '
                    'served Redfish mockup')


def _fabric(**info):
    # Mockup servers take any credentials.
    driver_info = {'address': URL, 'username': 'mockup',
                   'password': 'mockup', 'poll_interval': 0.05,
                   'timeout': 30}
    driver_info.update(info)
    return {'name': 'mockup', 'driver_info': driver_info}


def test_every_device_of_the_mockup_is_read_or_refused_with_a_reason(
        root_reads):
    driver = redfish_driver.RedfishFabricDriver()
    found = driver.discover(_fabric())
    reads.assert_once_per_connection(root_reads)
    assert found, 'the mockup shows no device at all'
    for item in found:
        assert not item.get('error'), item
        if item.get('not_poolable'):
            continue
        assert item['kind'] in base.KINDS, item
        # What the compute agent needs to find the function.
        assert item['vendor_id'] and item['product_id'], item


@pytest.mark.skipif(not STATEFUL, reason='the mockup server changes '
                    'nothing; set COMPOSABLE_REDFISH_MOCKUP_STATEFUL with '
                    'tools/redfish-mockup-state.py in front of it')
def test_a_device_given_to_a_host_is_taken_back_and_given_again(
        root_reads):
    driver = redfish_driver.RedfishFabricDriver()
    found = driver.discover(_fabric())
    held = [d for d in found if not d.get('not_poolable')
            and len(d.get('holders') or []) == 1]
    if not held:
        pytest.skip('the mockup gives no poolable device to one host')
    device = held[0]
    holder = device['holders'][0]
    # Map a host to the holder's system by @odata.id where the mockup's
    # systems share names.
    systems = {s.uri: s for s in _systems(driver)}
    system = holder if holder in systems else [
        uri for uri in systems
        if holder in (systems[uri].names() or ())][0]
    fabric = _fabric(system_map={'mockup-host': system})
    host = {'name': 'mockup-host'}
    del root_reads[:]
    driver.unbind_device(fabric, device, host)
    reads.assert_once_per_connection(root_reads)
    after = {d['address']: d for d in driver.discover(fabric)}
    assert after[device['address']]['bound_to'] is None
    del root_reads[:]
    locator = driver.bind_device(fabric, device, host)
    reads.assert_once_per_connection(root_reads)
    assert locator.fabric_ref == device['address']
    assert locator.vendor_id == device['vendor_id']
    after = {d['address']: d for d in driver.discover(fabric)}
    assert after[device['address']]['bound_to'] == 'mockup-host'


def _systems(driver):
    info = driver._info(_fabric())
    with driver._connect(info) as conn:
        return driver._systems(conn)[0]
