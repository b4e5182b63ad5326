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

"""The redfish driver's check of a fabric's driver_info."""

import pytest

from composable.common import exception
from composable.fabric.redfish import driver as redfish_driver

SECRET = 's3cret-pa55'
GOOD = {'address': 'https://rfcs.example:8443', 'username': 'composer',
        'password': SECRET}


def _check(**change):
    info = dict(GOOD)
    info.update(change)
    for key in [k for k, v in change.items() if v is KeyError]:
        del info[key]
    redfish_driver.RedfishFabricDriver().validate_driver_info(info)


def test_minimal_and_full_driver_info():
    _check()
    # Nothing listens on port 1: system_map is checked against the
    # service only when it answers.
    _check(address='http://127.0.0.1:1', verify_ca='/etc/ssl/rfcs-ca.pem',
           system_map={'compute-0': '/redfish/v1/Systems/1'},
           match_by='uuid', poll_interval=0.5, timeout=120,
           mode='expandable')
    _check(verify_ca=False)
    for mode in ('auto', 'expandable', 'specific'):
        _check(composition_mode=mode)
    # The fabric is looked up only when the service answers.
    local = 'http://127.0.0.1:1'
    _check(address=local, composition_mode='zones')
    _check(address=local, composition_mode='zones', fabric_id='CXL')
    _check(address=local, fabric_id='/redfish/v1/Fabrics/PCIe')


def test_string_forms_of_the_cli():
    info = dict(GOOD, timeout='90', poll_interval='0.5', verify_ca='False',
                system_map='{"compute-0": "/redfish/v1/Systems/1"}',
                address='http://127.0.0.1:1')
    redfish_driver.RedfishFabricDriver().validate_driver_info(info)
    assert redfish_driver.normalize(info) == dict(
        GOOD, address='http://127.0.0.1:1', timeout=90.0, poll_interval=0.5,
        verify_ca=False,
        system_map={'compute-0': '/redfish/v1/Systems/1'})
    # A path stays a path.
    assert redfish_driver.normalize(
        dict(GOOD, verify_ca='/etc/ca.pem'))['verify_ca'] == '/etc/ca.pem'


@pytest.mark.parametrize('change,key', [
    ({'address': KeyError}, 'address'),
    ({'address': 'ftp://rfcs.example'}, 'address'),
    ({'address': 'rfcs.example'}, 'address'),
    ({'address': 'https://composer:%s@rfcs.example' % SECRET}, 'address'),
    ({'username': ''}, 'username'),
    ({'password': KeyError}, 'password'),
    ({'password': 7}, 'password'),
    ({'verify_ca': ''}, 'verify_ca'),
    ({'verify_ca': 1}, 'verify_ca'),
    ({'system_map': ['compute-0']}, 'system_map'),
    ({'system_map': {'compute-0': 'Systems/1'}}, 'system_map'),
    ({'system_map': {'compute-0': ' '}}, 'system_map'),
    ({'system_map': {'compute-0': 7}}, 'system_map'),
    ({'system_map': '{not json'}, 'system_map'),
    ({'match_by': 'serial'}, 'match_by'),
    ({'poll_interval': 0}, 'poll_interval'),
    ({'timeout': 'soon'}, 'timeout'),
    ({'timeout': True}, 'timeout'),
    ({'timeout': float('inf')}, 'timeout'),
    ({'timeout': 'inf'}, 'timeout'),
    ({'timeout': float('nan')}, 'timeout'),
    ({'timeout': 3601}, 'timeout'),
    ({'address': 'http://[::1'}, 'address'),
    ({'address': 'http://rfcs.example:99999'}, 'address'),
    ({'mode': 'composed'}, 'mode'),
    ({'composition_mode': 'composed'}, 'composition_mode'),
    ({'composition_mode': ''}, 'composition_mode'),
    ({'composition_mode': None}, 'composition_mode'),
    ({'passwrod': 'typo'}, 'passwrod'),
    ({'fabric_id': ''}, 'fabric_id'),
    ({'fabric_id': 7}, 'fabric_id'),
    ({'fabric_id': 'CXL', 'composition_mode': 'expandable'}, 'fabric_id'),
])
def test_bad_driver_info_names_the_key(change, key):
    with pytest.raises(exception.Invalid) as err:
        _check(**change)
    assert key in str(err.value)
    assert SECRET not in str(err.value)


def test_driver_info_must_be_an_object():
    with pytest.raises(exception.Invalid):
        redfish_driver.RedfishFabricDriver().validate_driver_info(None)
