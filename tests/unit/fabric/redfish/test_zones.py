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

"""What the redfish driver's zones mode reads from a fabric's endpoints,
zones and connections, on payloads shaped like DMTF's CXL fabric
mockups (one zone of endpoints per host initiator, a switch endpoint in
every zone, targets naming a CXL logical device with a GPU processor or
memory chunks)."""

import pytest

from composable.fabric.redfish import models
from composable.fabric.redfish import zones

FABRIC = '/redfish/v1/Fabrics/CXL'
SYSTEMS = '/redfish/v1/Systems'


def _link(uri):
    return {'@odata.id': uri}


def _endpoint(eid, entities, zones_=(), **more):
    body = {'@odata.type': '#Endpoint.v1_8_2.Endpoint',
            '@odata.id': '%s/Endpoints/%s' % (FABRIC, eid), 'Id': eid,
            'ConnectedEntities': entities,
            'Links': {'Zones': [_link('%s/Zones/%s' % (FABRIC, z))
                                for z in zones_]}}
    body.update(more)
    return models.Endpoint.parse(body)


def _initiator(eid, system, zones_=()):
    return _endpoint(eid, [{
        'EntityType': 'Processor', 'EntityRole': 'Initiator',
        'EntityLink': _link('%s/%s/Processors/CPU' % (SYSTEMS, system))}],
        zones_)


def _target(eid, zones_=()):
    return _endpoint(eid, [{
        'EntityType': 'Processor', 'EntityRole': 'Target',
        'EntityLink': _link('/redfish/v1/Chassis/Box/Processors/' + eid)}],
        zones_)


def _zone(zid, endpoints=(), zone_type='ZoneOfEndpoints', **links):
    body = {'@odata.type': '#Zone.v1_6_3.Zone',
            '@odata.id': '%s/Zones/%s' % (FABRIC, zid), 'Id': zid,
            'ZoneType': zone_type,
            'Links': {'Endpoints': [_link('%s/Endpoints/%s' % (FABRIC, e))
                                    for e in endpoints]}}
    body['Links'].update(links)
    return models.FabricZone.parse(body)


def _zoning(items, connections=True):
    fabric = models.Fabric.parse({
        '@odata.id': FABRIC, 'Id': 'CXL', 'Zones': _link(FABRIC + '/Zones'),
        'Endpoints': _link(FABRIC + '/Endpoints'),
        'Connections': _link(FABRIC + '/Connections') if connections
        else None})
    zoning = zones.Zoning(fabric, SYSTEMS)
    for item in items:
        zoning.add(item)
    return zoning.finish()


def _ep(eid):
    return '%s/Endpoints/%s' % (FABRIC, eid)


def _sys(name):
    return '%s/%s' % (SYSTEMS, name)


def test_own_zones_hold_and_a_zone_of_zones_tells_reach():
    zoning = _zoning([
        _initiator('I1', 'A'), _initiator('I2', 'B'), _initiator('I3', 'C'),
        _target('GPU0'), _target('GPU1'), _target('GPU2'),
        _zone('ZA', ['I1', 'GPU0']), _zone('ZB', ['I2']),
        _zone('ZC', ['I3']), _zone('Free', ['GPU1']),
        # A and B share a domain with the free zone; C is apart.
        _zone('Rack', zone_type='ZoneOfZones', ContainsZones=[
            _link(FABRIC + '/Zones/' + z) for z in ('ZA', 'ZB', 'Free')]),
    ], connections=False)
    assert zoning.holders(_ep('GPU0')) == [_sys('A')]
    assert zoning.holders(_ep('GPU1')) == []
    assert zoning.reach(_ep('GPU1')) == [_sys('A'), _sys('B')]
    # Given to A: reachable by those who share A's domain.
    assert zoning.reach(_ep('GPU0')) == [_sys('A'), _sys('B')]
    # In no zone at all: nobody reaches it (the service says reach).
    assert zoning.reach(_ep('GPU2')) == []
    assert zoning.zone_for(_sys('C'), _ep('GPU1')).uri.endswith('/ZC')


def test_allowable_values_and_shared_zones():
    zoning = _zoning([
        _initiator('I1', 'A'), _initiator('I2', 'B'),
        _target('GPU0'), _target('NIC0'),
        _zone('ZA', ['I1'], **{'Endpoints@Redfish.AllowableValues': [
            _link(_ep('GPU0'))]}),
        _zone('ZA2', ['I1'], **{'Endpoints@Redfish.AllowableValues': [
            _link(_ep('NIC0'))]}),
        _zone('ZB', ['I2']),
        # Both initiators and the NIC: a zone of reach, not of binding.
        _zone('Shared', ['I1', 'I2', 'NIC0']),
    ])
    assert zoning.reach(_ep('GPU0')) == [_sys('A')]
    assert zoning.reach(_ep('NIC0')) == [_sys('A'), _sys('B')]
    assert zoning.holders(_ep('NIC0')) == []
    # The zone that may take it is the one picked.
    assert zoning.zone_for(_sys('A'), _ep('NIC0')).uri.endswith('/ZA2')


def test_a_host_with_several_zones_gets_the_device_in_the_right_one():
    zoning = _zoning([
        _initiator('I1', 'A'), _target('GPU0'), _target('GPU1'),
        _target('NIC0'), _target('NVMe0'),
        # ZA1 may be given GPU0 only: never asked for another device.
        _zone('ZA1', ['I1'], **{'Endpoints@Redfish.AllowableValues': [
            _link(_ep('GPU0'))]}),
        _zone('ZA2', ['I1'], ContainedByZones=[
            _link(FABRIC + '/Zones/Pod2')]),
        _zone('ZA3', ['I1']),
        _zone('Free2', ['NIC0'], ContainedByZones=[
            _link(FABRIC + '/Zones/Pod2')]),
        _zone('Pod2', zone_type='ZoneOfZones'),
    ], connections=False)
    assert zoning.zone_for(_sys('A'), _ep('GPU0')).uri.endswith('/ZA1')
    # The zone a zone of zones joins with the device's.
    assert zoning.zone_for(_sys('A'), _ep('NIC0')).uri.endswith('/ZA2')
    # Nothing tells: the first (by URI) that may take anything, not ZA1.
    assert zoning.zone_for(_sys('A'), _ep('GPU1')).uri.endswith('/ZA2')
    # Only zones that leave it out: none.
    zoning = _zoning([
        _initiator('I1', 'A'), _target('GPU0'), _target('GPU1'),
        _zone('ZA1', ['I1'], **{'Endpoints@Redfish.AllowableValues': [
            _link(_ep('GPU0'))]})])
    assert zoning.zone_for(_sys('A'), _ep('GPU1')) is None


def test_a_host_with_a_zone_per_switch_gets_the_devices_switch():
    def port(switch, number):
        return _link('%s/Switches/%s/Ports/%s' % (FABRIC, switch, number))

    switch2 = _endpoint('SW2', [{
        'EntityType': 'Switch', 'EntityRole': 'Target',
        'EntityLink': _link(FABRIC + '/Switches/S2')}])
    gpu = _endpoint('GPU0', [{
        'EntityType': 'Processor', 'EntityRole': 'Target',
        'EntityLink': _link('/redfish/v1/Chassis/Box/Processors/GPU0')}],
        Links={'ConnectedPorts': [port('S2', 'D7')]})
    nic = _endpoint('NIC0', [{
        'EntityType': 'NetworkController', 'EntityRole': 'Target',
        'EntityLink': _link('/redfish/v1/Chassis/Box/NetworkAdapters/N')}],
        Links={'Ports': [port('S3', 'D1')]})
    zoning = _zoning([
        _initiator('I1', 'A'), _initiator('I2', 'A'), gpu, nic, switch2,
        _zone('ZA-S1', ['I1'], InvolvedSwitches=[
            _link(FABRIC + '/Switches/S1')]),
        # S1's and S3's zones name their switch; S2's holds its switch
        # endpoint.
        _zone('ZA-S2', ['I2', 'SW2']),
        _zone('ZA-S3', ['I1'], InvolvedSwitches=[
            _link(FABRIC + '/Switches/S3')]),
    ], connections=False)
    assert gpu.switches == {FABRIC + '/Switches/S2'}
    assert zoning.zone_for(_sys('A'), _ep('GPU0')).uri.endswith('/ZA-S2')
    assert zoning.zone_for(_sys('A'), _ep('NIC0')).uri.endswith('/ZA-S3')


def test_nothing_said_of_reach_means_every_host_on_the_fabric():
    # B has no zone (one is made for it, or a connection) and C no
    # initiator on the fabric.
    for connections in (False, True):
        zoning = _zoning([
            _initiator('I1', 'A'), _initiator('I2', 'B'), _target('GPU0'),
            _zone('ZA', ['I1'])], connections=connections)
        assert zoning.reach(_ep('GPU0')) == [_sys('A'), _sys('B')]


def test_connections_and_endpoint_side_zone_links_hold_too():
    connection = models.FabricConnection.parse({
        '@odata.id': FABRIC + '/Connections/12',
        'Links': {'InitiatorEndpoints': [_link(_ep('I2'))],
                  'TargetEndpoints': [_link(_ep('MEM'))]}})
    zoning = _zoning([
        _initiator('I1', 'A'), _initiator('I2', 'B'),
        # The zone does not list GPU0; GPU0 says it is in the zone.
        _target('GPU0', zones_=['ZA']), _target('MEM'),
        _zone('ZA', ['I1']), connection])
    assert zoning.holders(_ep('GPU0')) == [_sys('A')]
    assert zoning.holders(_ep('MEM')) == [_sys('B')]
    assert [c.uri for c in zoning.connections_of(_sys('B'), _ep('MEM'))] \
        == [FABRIC + '/Connections/12']


def test_an_unreadable_zone_or_member_makes_its_devices_unknown():
    gpu = _target('GPU0', zones_=['ZA'])
    nic = _target('NIC0')
    zoning = _zoning([_initiator('I1', 'A'), gpu, nic,
                      _zone('ZB', ['I9', 'NIC0'])])
    zoning.unreadable[FABRIC + '/Zones/ZA'] = 'HTTP 404'
    zoning.unreadable[_ep('I9')] = 'HTTP 500'
    zoning.finish()
    assert 'ZA' in zoning.unknown_reason(gpu)
    assert 'I9' in zoning.unknown_reason(nic)


def test_an_endpoint_without_zone_links_is_unknown_if_any_zone_is():
    quiet = models.Endpoint.parse({
        '@odata.id': _ep('GPU0'), 'ConnectedEntities': [], 'Links': {}})
    zoning = _zoning([quiet])
    assert zoning.unknown_reason(quiet) is None
    zoning.unreadable[FABRIC + '/Zones/Z1'] = 'HTTP 404'
    assert 'does not say which zones' in zoning.unknown_reason(quiet)


@pytest.mark.parametrize('code,kind', [
    ('0x030000', 'gpu'), ('0x030200', 'gpu'), ('0x010802', 'nvme'),
    ('0x010400', None), ('0x020000', 'nic'), ('0x120000', 'fpga'),
    ('0x0B4000', 'pci'), ('0x050210', None), ('garbage', None),
    (None, None)])
def test_kind_by_class_code(code, kind):
    assert models.class_code_kind(code) == kind


def test_cxl_memory_is_refused_with_the_reason():
    device = models.Device()
    device.read_member({
        '@odata.type': '#CXLLogicalDevice.v1_3_0.CXLLogicalDevice',
        '@odata.id': '/redfish/v1/Chassis/M/PCIeDevices/1/'
                     'CXLLogicalDevices/1',
        'SemanticsSupported': ['CXLio', 'CXLmem'], 'Links': {}})
    device.read_member({
        '@odata.type': '#PCIeFunction.v1_7_0.PCIeFunction',
        '@odata.id': '/redfish/v1/Chassis/M/PCIeDevices/1/PCIeFunctions/1',
        'DeviceClass': 'MemoryController', 'ClassCode': '0x050210',
        'VendorId': '0xABCD', 'DeviceId': '0xABCD', 'Links': {}})
    assert device.not_poolable.count(models.CXL_MEMORY_REASON) == 2
    # A type 2 device (cache and memory) is an accelerator.
    device = models.Device()
    device.read_member({
        '@odata.type': '#CXLLogicalDevice.v1_3_0.CXLLogicalDevice',
        '@odata.id': '/redfish/v1/Chassis/G/PCIeDevices/1/'
                     'CXLLogicalDevices/1',
        'SemanticsSupported': ['CXLio', 'CXLcache', 'CXLmem'],
        'Links': {'PCIeFunctions': [_link('/redfish/v1/Chassis/G/'
                                          'PCIeDevices/1/PCIeFunctions/1')]}})
    device.read_pcie_function({'DeviceClass': 'ProcessingAccelerators',
                               'VendorId': '0x1AB4', 'DeviceId': '0x0002'})
    assert device.not_poolable is None
    assert (device.kind, device.vendor_id, device.product_id) == (
        'fpga', '1ab4', '0002')


def test_endpoint_ids_of_its_own():
    endpoint = _endpoint('T9', [{
        'EntityType': 'DisplayController', 'EntityRole': 'Target',
        'EntityPciId': {'VendorId': '0x10DE', 'DeviceId': '0x2330',
                        'ClassCode': '0x030200'}}])
    assert endpoint.targets()[0].pci == ('10de', '2330', '0x030200')
    assert endpoint.initiator_systems(SYSTEMS) == []
    with pytest.raises(models.ParseError):
        models.Endpoint.parse({'@odata.id': _ep('X'),
                               'ConnectedEntities': {'not': 'a list'}})
