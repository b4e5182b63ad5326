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

"""composable.common.locator: the locator and the attach result, their
checks, and their one serialised form."""

import dataclasses
import json

import pytest

from composable.common import locator

GPU = locator.Locator(vendor_id='10de', product_id='2330',
                      serial='0011223344556677',
                      fabric_ref='/redfish/v1/CompositionService/'
                                 'ResourceBlocks/GPU0')


# The primitive every release has sent and stored.
OLD_ROW = {'vendor_id': '10de', 'product_id': '2330',
           'serial': '0011223344556677', 'pci_address': None,
           'fabric_ref': '/redfish/v1/CompositionService/ResourceBlocks/GPU0'}


def test_round_trip_through_json():
    primitive = GPU.to_primitive()
    assert primitive == OLD_ROW
    again = locator.Locator.from_primitive(json.loads(json.dumps(primitive)))
    assert again == GPU
    assert hash(again) == hash(GPU)


def test_every_field_round_trips():
    full = locator.Locator(vendor_id='8086', product_id='1572',
                           serial='SN 1', pci_address='0000:41:00.1',
                           fabric_ref='7')
    assert locator.Locator.from_primitive(full.to_primitive()) == full
    assert set(full.to_primitive()) == set(locator.Locator.FIELDS)


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        GPU.serial = 'other'


def test_old_rows_are_read():
    # A row or agent record written before the type: the same five keys.
    assert locator.Locator.from_primitive(OLD_ROW) == GPU
    # Ids as a fabric printed them, keys left out (an older conductor's
    # SR-IOV view), unknown keys a newer sender may add.
    old = locator.Locator.from_primitive(
        {'vendor_id': '0x10DE', 'product_id': '2330', 'colour': 'red'})
    assert (old.vendor_id, old.product_id, old.serial, old.pci_address,
            old.fabric_ref) == ('10de', '2330', None, None, None)
    # A CXL memory device's locator was {'serial', 'device'}.
    cxl = locator.Locator.from_primitive({'serial': '0x1a2b',
                                          'device': 'cxl-mem-0'})
    assert (cxl.serial, cxl.fabric_ref) == ('0x1a2b', 'cxl-mem-0')
    assert cxl.to_primitive()['serial'] == '0x1a2b'
    # An empty locator: nothing known (a teardown fills it from the
    # device).
    assert locator.Locator.from_primitive({}) == locator.Locator()


def test_an_old_reader_finds_what_it_read_before():
    # An agent one release older reads the primitive with dict.get.
    primitive = locator.Locator(serial='0x1a2b',
                                fabric_ref='cxl-mem-0').to_primitive()
    assert primitive.get('serial') == '0x1a2b'
    assert dict(primitive, pci_address=None)['vendor_id'] is None


def test_ids_are_normalised():
    found = locator.Locator(vendor_id='0x10DE', product_id='b5')
    assert (found.vendor_id, found.product_id) == ('10de', '00b5')
    assert locator.Locator(vendor_id='', serial='').to_primitive() == {
        'vendor_id': None, 'product_id': None, 'serial': None,
        'pci_address': None, 'fabric_ref': None}


def test_a_port_number_is_a_fabric_reference():
    assert locator.Locator(fabric_ref=12).fabric_ref == '12'


@pytest.mark.parametrize('field,value', [
    ('vendor_id', '10de/..'), ('vendor_id', 0x10de), ('vendor_id', '12345'),
    ('vendor_id', ' 10de'), ('product_id', 'nvidia'),
    ('serial', 'x' * 129), ('serial', 'bad\nserial'), ('serial', ' lead'),
    ('serial', 42),
    ('pci_address', '../../../etc'), ('pci_address', '41:00.0'),
    ('pci_address', '0000:41:00.0 '), ('pci_address', '0000:41:00.8'),
    ('pci_address', '0000:4G:00.0'), ('pci_address', '0000:41:00.0\n'),
    ('pci_address', b'0000:41:00.0'),
    ('fabric_ref', 'x' * 1025), ('fabric_ref', 'a\x00b'),
    ('fabric_ref', ['GPU0'])])
def test_a_bad_field_is_refused_by_name(field, value):
    with pytest.raises(locator.InvalidLocator) as e:
        locator.Locator(**{field: value})
    assert e.value.field == field
    assert str(e.value).startswith('locator %s: ' % field)
    assert isinstance(e.value, ValueError)
    with pytest.raises(locator.InvalidLocator) as e:
        locator.Locator.from_primitive(dict(OLD_ROW, **{field: value}))
    assert e.value.field == field


@pytest.mark.parametrize('value', ['0000:41:00.0', [OLD_ROW], None])
def test_a_primitive_that_is_no_dict_is_refused(value):
    with pytest.raises(locator.InvalidLocator) as e:
        locator.Locator.from_primitive(value)
    assert 'a locator is a dict' in str(e.value)


def test_filled_from_takes_only_what_is_unknown():
    answer = locator.Locator(serial='S9')
    found = answer.filled_from(vendor_id='10de', product_id='2330',
                               serial='0011223344556677',
                               fabric_ref='fake-gpu-0')
    # What the bind answers wins over what the row says.
    assert found.serial == 'S9'
    assert (found.vendor_id, found.product_id, found.fabric_ref) == (
        '10de', '2330', 'fake-gpu-0')
    assert found.pci_address is None
    assert answer.filled_from(serial=None) is answer
    # What fills in is checked as well.
    with pytest.raises(locator.InvalidLocator) as e:
        answer.filled_from(vendor_id='nvidia')
    assert e.value.field == 'vendor_id'


def test_with_address_and_describe():
    at = GPU.with_address('0000:41:00.0')
    assert at.pci_address == '0000:41:00.0' and GPU.pci_address is None
    assert at.describe() == (
        'address 0000:41:00.0, ids 10de:2330, serial 0011223344556677, '
        'fabric reference /redfish/v1/CompositionService/ResourceBlocks/'
        'GPU0')
    assert locator.Locator().describe() == 'an empty locator'
    with pytest.raises(locator.InvalidLocator):
        GPU.with_address('41:00.0')


# The attach result.

BOUND = {'address': '0000:41:00.0', 'found': True, 'iommu_group': '12',
         'vfio_node': '/dev/vfio/12', 'bound': True,
         'members': ['0000:40:00.0', '0000:41:00.0']}


def test_attach_result_of_a_bound_function():
    result = locator.AttachResult.from_primitive(BOUND)
    assert result.ok and result.bound and result.found
    assert result.members == ('0000:40:00.0', '0000:41:00.0')
    assert result.error is None and result.message is None
    timed = locator.AttachResult.from_primitive(
        dict(BOUND, find_ms=12.5, bind_ms=3))
    assert (timed.find_ms, timed.bind_ms) == (12.5, 3)
    assert locator.AttachResult.from_primitive(
        json.loads(json.dumps(result.to_primitive()))) == result


def test_attach_result_of_a_refused_function():
    result = locator.AttachResult.from_primitive({
        'address': '0000:41:00.0', 'found': False,
        'error': 'iommu_group_shared', 'message': 'IOMMU group 12 ...'})
    assert not result.ok and not result.bound
    assert result.error == 'iommu_group_shared'
    assert result.address == '0000:41:00.0'


@pytest.mark.parametrize('change,field', [
    ({'address': None}, 'address'), ({'address': '41:00.0'}, 'address'),
    ({'found': 'yes'}, 'found'), ({'bound': 1}, 'bound'),
    ({'members': '0000:41:00.0'}, 'members'),
    ({'members': ['../etc']}, 'members'),
    ({'iommu_group': 12}, 'iommu_group'),
    ({'error': 'GroupNotIsolated'}, 'error'), ({'message': 3}, 'message'),
    ({'find_ms': '12'}, 'find_ms'), ({'bind_ms': True}, 'bind_ms')])
def test_attach_result_refuses_bad_fields(change, field):
    value = dict(BOUND)
    value.update(change)
    with pytest.raises(locator.InvalidLocator) as e:
        locator.AttachResult.from_primitive(value)
    assert e.value.field == field
