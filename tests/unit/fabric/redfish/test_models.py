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

"""The redfish driver's models, on payloads shaped like DMTF's public
composability mockups (DSP2050)."""

import pytest

from composable.fabric.redfish import models

BLOCKS = '/redfish/v1/CompositionService/ResourceBlocks'

OFFLOAD_BLOCK = {
    '@odata.type': '#ResourceBlock.v1_4_3.ResourceBlock',
    '@odata.id': BLOCKS + '/OffloadBlock9',
    'Id': 'OffloadBlock9',
    'Name': 'Offload Block 0',
    'ResourceBlockType': ['Processor'],
    'Status': {'State': 'Enabled', 'Health': 'OK'},
    'CompositionStatus': {'Reserved': False, 'CompositionState': 'Unused',
                          'SharingCapable': False, 'MaxCompositions': 1,
                          'NumberOfCompositions': 0},
    'Processors': [{'@odata.id': BLOCKS + '/OffloadBlock9/Processors/GPU'}],
    'Links': {'ComputerSystems': [],
              'Chassis': [{'@odata.id': '/redfish/v1/Chassis/Module6'}],
              'Zones': [{'@odata.id':
                         '/redfish/v1/CompositionService/ResourceZones/2'}]},
}

COMPUTE_BLOCK = {
    '@odata.type': '#ResourceBlock.v1_4_3.ResourceBlock',
    '@odata.id': BLOCKS + '/ComputeBlock1',
    'ResourceBlockType': ['Compute'],
    'Status': {'State': 'Enabled', 'Health': 'OK'},
    'CompositionStatus': {'CompositionState': 'Composed'},
    'Processors': [{'@odata.id': BLOCKS + '/ComputeBlock1/Processors/CPU0'}],
    'Memory': [{'@odata.id': BLOCKS + '/ComputeBlock1/Memory/DIMM0'}],
    'Links': {'ComputerSystems': [
        {'@odata.id': '/redfish/v1/Systems/ComposedSystem'}]},
}

SYSTEM = {
    '@odata.type': '#ComputerSystem.v1_27_0.ComputerSystem',
    '@odata.id': '/redfish/v1/Systems/ComposedSystem',
    'Id': 'ComposedSystem',
    'Name': 'Sample Composed System',
    'SystemType': 'Composed',
    'UUID': '37596F04-B032-48CE-9BAD-7D55A61FE574',
    'HostName': 'composed-system',
    'Links': {'ResourceBlocks': [
        {'@odata.id': BLOCKS + '/ComputeBlock1'},
        {'@odata.id': BLOCKS + '/DriveBlock3'}]},
    'Actions': {
        '#ComputerSystem.AddResourceBlock': {
            'target': '/redfish/v1/Systems/ComposedSystem/Actions/'
                      'ComputerSystem.AddResourceBlock'},
        '#ComputerSystem.RemoveResourceBlock': {
            'target': '/redfish/v1/Systems/ComposedSystem/Actions/'
                      'ComputerSystem.RemoveResourceBlock'}},
}

ZONE = {
    '@odata.type': '#Zone.v1_6_3.Zone',
    '@odata.id': '/redfish/v1/CompositionService/ResourceZones/1',
    'Name': 'Resource Zone 1',
    'ZoneType': 'ZoneOfResourceBlocks',
    'Links': {'ResourceBlocks': [{'@odata.id': BLOCKS + '/ComputeBlock1'},
                                 {'@odata.id': BLOCKS + '/DriveBlock3'}]},
}


def test_resource_block():
    block = models.ResourceBlock.parse(OFFLOAD_BLOCK)
    assert block.uri == BLOCKS + '/OffloadBlock9'
    assert block.id == 'OffloadBlock9'
    assert block.types == ['Processor']
    assert block.state == models.UNUSED
    assert block.health == 'ok'
    assert block.systems == []
    assert block.zones == ['/redfish/v1/CompositionService/ResourceZones/2']
    assert block.member_uris == [BLOCKS + '/OffloadBlock9/Processors/GPU']
    assert block.is_device


def test_compute_block_is_no_device():
    block = models.ResourceBlock.parse(COMPUTE_BLOCK)
    assert not block.is_device
    assert block.systems == ['/redfish/v1/Systems/ComposedSystem']


def test_resource_block_type_as_a_single_string():
    data = dict(OFFLOAD_BLOCK, ResourceBlockType='Storage')
    assert models.ResourceBlock.parse(data).types == ['Storage']


def test_failed_block_messages():
    data = dict(OFFLOAD_BLOCK, Status={
        'State': 'Enabled', 'Health': 'Critical',
        'Conditions': [{'Message': 'link down', 'Severity': 'Critical'}]},
        CompositionStatus={'CompositionState': 'Failed'})
    block = models.ResourceBlock.parse(data)
    assert block.state == models.FAILED
    assert block.health == 'critical'
    assert block.messages == ['link down']


@pytest.mark.parametrize('change', [
    {'ResourceBlockType': None},
    {'ResourceBlockType': [1]},
    {'CompositionStatus': None},
    {'CompositionStatus': {'CompositionState': ''}},
    {'Links': {'Zones': 'zone 1'}},
    {'Links': {'Zones': [{'no': 'id'}]}},
    {'Processors': {'@odata.id': 7}},
    {'@odata.id': None},
])
def test_resource_block_garbage(change):
    with pytest.raises(models.ParseError):
        models.ResourceBlock.parse(dict(OFFLOAD_BLOCK, **change))


def test_system():
    system = models.System.parse(SYSTEM)
    assert system.uri == '/redfish/v1/Systems/ComposedSystem'
    assert system.name == 'Sample Composed System'
    assert system.host_name == 'composed-system'
    assert system.uuid == '37596f04-b032-48ce-9bad-7d55a61fe574'
    assert system.blocks == [BLOCKS + '/ComputeBlock1',
                             BLOCKS + '/DriveBlock3']
    assert system.target(models.System.ADD) == (
        SYSTEM['@odata.id'] + '/Actions/ComputerSystem.AddResourceBlock')
    assert system.answers_to('Composed-System')
    assert system.answers_to('Sample Composed System')
    assert not system.answers_to('other')
    assert not system.answers_to('')
    assert system.names() == {'composed-system', 'sample composed system'}


def test_system_without_advertised_actions():
    data = dict(SYSTEM)
    del data['Actions']
    system = models.System.parse(data)
    assert system.target(models.System.REMOVE) == (
        SYSTEM['@odata.id'] + '/Actions/ComputerSystem.RemoveResourceBlock')


def test_system_expandable_and_type():
    system = models.System.parse(dict(SYSTEM, SystemType='Composed'))
    assert system.system_type == 'Composed'
    assert system.expandable
    reset_only = dict(SYSTEM, Actions={'#ComputerSystem.Reset': {
        'target': SYSTEM['@odata.id'] + '/Actions/ComputerSystem.Reset'}})
    system = models.System.parse(reset_only)
    assert not system.expandable
    assert system.offered == ['ComputerSystem.Reset']


SYSTEMS = '/redfish/v1/Systems'


def _systems(**more):
    data = {'@odata.id': SYSTEMS, 'Members': []}
    data.update(more)
    return data


@pytest.mark.parametrize('data,offered,capabilities', [
    (_systems(), False, None),
    (_systems(**{'@Redfish.CollectionCapabilities': {'Capabilities': [
        {'UseCase': 'VolumeCreation',
         'CapabilitiesObject': {'@odata.id': SYSTEMS + '/Other'}},
        {'UseCase': 'ComputerSystemComposition',
         'CapabilitiesObject': {'@odata.id': SYSTEMS + '/Capabilities'}},
    ]}}), True, SYSTEMS + '/Capabilities'),
    # The use case without a capabilities object still says it.
    (_systems(**{'@Redfish.CollectionCapabilities': {'Capabilities': [
        {'UseCase': 'ComputerSystemComposition'}]}}), True, None),
    (_systems(**{'ResourceBlocks@Redfish.AllowableValues': [
        {'@odata.id': '/redfish/v1/CompositionService/ResourceBlocks/1'}]}),
     True, None),
    (_systems(Links={'ResourceBlocks@Redfish.AllowableValues': []}),
     True, None),
    (_systems(**{'@Redfish.CollectionCapabilities': 'garbage'}), False,
     None),
    (_systems(**{'@Redfish.CollectionCapabilities': {'Capabilities': [
        {'UseCase': 'ComputerSystemConstrainedComposition',
         'CapabilitiesObject': {'@odata.id': SYSTEMS + '/Constrained'}}]}}),
     False, None),
])
def test_system_composition(data, offered, capabilities):
    found = models.SystemComposition.parse(data)
    assert (found.offered, found.capabilities_uri) == (offered,
                                                       capabilities)
    assert found.updatable is False
    assert found.constrained == ('Constrained' in str(data))


@pytest.mark.parametrize('links,updatable', [
    ({'ResourceBlocks@Redfish.UpdatableAfterCreate': True}, True),
    ({'ResourceBlocks@Redfish.UpdatableAfterCreate': False}, False),
    ({'ResourceBlocks@Redfish.UpdatableAfterCreate': 'true'}, False),
    ({}, False), (None, False)])
def test_composition_capabilities(links, updatable):
    found = models.SystemComposition.parse(_systems())
    found.read_capabilities({'@odata.id': SYSTEMS + '/Capabilities',
                             'Links': links})
    assert found.updatable is updatable


def test_zone():
    zone = models.ResourceZone.parse(ZONE)
    assert zone.name == 'Resource Zone 1'
    assert zone.blocks == [BLOCKS + '/ComputeBlock1', BLOCKS + '/DriveBlock3']


def test_collection_members_at_top_level():
    assert models.members({'Members': [{'@odata.id': '/a'}],
                           'Members@odata.count': 1}) == ['/a']
    # Members under Links is not a Redfish collection.
    with pytest.raises(models.ParseError):
        models.members({'Links': {'Members': [{'@odata.id': '/a'}]}})


@pytest.mark.parametrize('value,expected', [
    ('0x10DE', '10de'), ('10de', '10de'), ('0X2330', '2330'),
    ('0x10D', None), ('nvidia', None), (4318, None), (None, None)])
def test_pci_id(value, expected):
    assert models.pci_id(value) == expected


def test_device_from_gpu_processor_and_pcie_function():
    device = models.Device()
    device.read_member({
        '@odata.type': '#Processor.v1_22_0.Processor',
        '@odata.id': BLOCKS + '/OffloadBlock9/Processors/GPU',
        'ProcessorType': 'GPU', 'Manufacturer': 'Contoso Graphics',
        'Model': 'Contoso Workstation VID2000',
        'Status': {'State': 'Enabled', 'Health': 'Warning'},
        'Links': {'PCIeDevice': {'@odata.id': '/redfish/v1/Chassis/1/'
                                              'PCIeDevices/GPU'},
                  'PCIeFunctions': [{'@odata.id': '/redfish/v1/Chassis/1/'
                                                  'PCIeDevices/GPU/'
                                                  'PCIeFunctions/0'}]}})
    assert device.kind == 'gpu'
    assert device.health == 'warning'
    assert device.function_uris == [
        '/redfish/v1/Chassis/1/PCIeDevices/GPU/PCIeFunctions/0']
    assert device.read_pcie_device({
        '@odata.id': '/redfish/v1/Chassis/1/PCIeDevices/GPU',
        'SerialNumber': 'SN1',
        'PCIeFunctions': {'@odata.id': '/redfish/v1/Chassis/1/PCIeDevices/'
                                       'GPU/PCIeFunctions'}}) == (
        '/redfish/v1/Chassis/1/PCIeDevices/GPU/PCIeFunctions')
    device.read_pcie_function({'VendorId': '0x10DE', 'DeviceId': '0x2330',
                               'DeviceClass': 'DisplayController'})
    assert (device.vendor_id, device.product_id, device.serial,
            device.model) == ('10de', '2330', 'SN1',
                              'Contoso Workstation VID2000')


def test_device_kinds():
    drive = models.Device()
    drive.read_member({'@odata.type': '#Drive.v1_22_0.Drive',
                       'Protocol': 'NVMe'})
    assert drive.kind == 'nvme'
    nic = models.Device()
    nic.read_member({'@odata.type': '#NetworkInterface.v1_2_3.'
                                    'NetworkInterface',
                     'Links': {'NetworkAdapter': {'@odata.id': '/n/1'}}})
    assert (nic.kind, nic.adapter_uris) == ('nic', ['/n/1'])
    nic.read_adapter({'Controllers': [{'Links': {'PCIeDevices': [
        {'@odata.id': '/p/1'}]}}]})
    assert nic.device_uris == ['/p/1']
    other = models.Device()
    other.read_pcie_function({'DeviceClass': 'ProcessingAccelerators'})
    assert other.kind == 'fpga'


# ---------------------------------------- what a block's members are

def _member(rtype, **body):
    data = {'@odata.type': '#%s.v1_0_0.%s' % (rtype, rtype),
            '@odata.id': '/redfish/v1/x/%s' % rtype, 'Id': rtype}
    data.update(body)
    return data


@pytest.mark.parametrize('data,hint,says', [
    (_member('Processor', ProcessorType='CPU'), None, 'is a CPU'),
    (_member('Drive', Protocol='SAS'), None, 'SAS drive'),
    (_member('Drive', Protocol='SATA'), None, 'SATA drive'),
    (_member('SimpleStorage', Devices=[{'Name': 'Bay 0'}]), None,
     'SAS/SATA'),
    (_member('Memory', CapacityMiB=32768), None, 'memory'),
    (_member('Volume'), None, 'volume'),
    (_member('NetworkInterface'), None, 'network settings'),
    (_member('EthernetInterface', MACAddress='aa:bb:cc:dd:ee:ff'), None,
     'network settings'),
    (_member('ComputerSystem'), None, 'computer system'),
    (_member('Storage', Drives=[]), None, 'holds no drives'),
    (_member('Switch'), None, 'does not bind'),
    # No @odata.type: the type the block's link promised.
    ({'@odata.id': '/redfish/v1/x/dimm', 'CapacityMiB': 1}, 'Memory',
     'memory'),
])
def test_members_no_host_can_be_given(data, hint, says):
    device = models.Device()
    device.read_member(data, hint)
    assert says in device.not_poolable
    assert device.bindable == 0


@pytest.mark.parametrize('data,kind', [
    (_member('Processor', ProcessorType='GPU'), 'gpu'),
    (_member('Processor', ProcessorType='FPGA'), 'fpga'),
    (_member('Processor', ProcessorType='Accelerator'), 'pci'),
    (_member('Drive', Protocol='NVMe'), 'nvme'),
    (_member('NetworkInterface', Links={'NetworkAdapter': {
        '@odata.id': '/redfish/v1/Chassis/1/NetworkAdapters/1'}}), 'nic'),
])
def test_bindable_members_still_need_pcie_ids(data, kind):
    device = models.Device()
    device.read_member(data)
    assert device.kind == kind
    assert 'no PCI vendor and device id' in device.not_poolable
    device.read_pcie_function({'VendorId': '0x10DE', 'DeviceId': '0x20B5'})
    assert device.not_poolable is None
    assert (device.vendor_id, device.product_id) == ('10de', '20b5')


def test_storage_leads_to_its_drives_and_controller_function():
    device = models.Device()
    device.read_member(_member(
        'Storage', Drives=[{'@odata.id': '/redfish/v1/x/Drives/0'}],
        StorageControllers=[{'MemberId': '0', 'Links': {'PCIeFunctions': [
            {'@odata.id': '/redfish/v1/x/PCIeFunctions/0'}]}}]))
    assert device.more == [('Drive', '/redfish/v1/x/Drives/0')]
    assert device.function_uris == ['/redfish/v1/x/PCIeFunctions/0']
    assert device.bindable == 0
    device.read_member(_member('Drive', Protocol='NVMe', Model='PM9A3',
                               SerialNumber='S64F'), 'Drive')
    assert (device.kind, device.model, device.serial) == (
        'nvme', 'PM9A3', 'S64F')


def test_a_block_of_any_type_but_a_systems_own_is_classified():
    block = models.ResourceBlock.parse(dict(
        OFFLOAD_BLOCK, ResourceBlockType=['Memory'],
        Memory=[{'@odata.id': BLOCKS + '/M/Memory/0'}]))
    assert block.is_device
    assert ('Memory', BLOCKS + '/M/Memory/0') in block.members
    block = models.ResourceBlock.parse(dict(
        OFFLOAD_BLOCK, ResourceBlockType=['Compute', 'Network']))
    assert not block.is_device


# ------------------------------------------------------------ assemblies

ASSEMBLY = '/redfish/v1/Chassis/1/PCIeDevices/GPU/Assembly'


def test_model_and_serial_from_an_assembly():
    device = models.Device()
    device.read_member({
        '@odata.type': '#Processor.v1_22_0.Processor',
        'ProcessorType': 'GPU', 'Assembly': {'@odata.id': ASSEMBLY},
        'Links': {'PCIeDevice': {'@odata.id': '/redfish/v1/Chassis/1/'
                                              'PCIeDevices/GPU'}}})
    device.read_pcie_device({'@odata.id': '/redfish/v1/Chassis/1/'
                                          'PCIeDevices/GPU',
                             'Assembly': {'@odata.id': ASSEMBLY}})
    # Both link the same Assembly: it is read once.
    assert device.assembly_uris == [ASSEMBLY]
    assert device.wants_assembly
    device.read_assembly({
        '@odata.id': ASSEMBLY, 'Assemblies': [
            {'MemberId': '0', 'Name': 'Riser', 'PartNumber': 'R-1'},
            {'MemberId': '1', 'Model': 'VID2000', 'SerialNumber': 'SN-A',
             'Producer': 'Contoso', 'PartNumber': 'P-2'},
            {'MemberId': '2', 'Model': 'Fan', 'SerialNumber': 'SN-F'}]})
    # The first entry that tells each fact.
    assert (device.model, device.serial, device.manufacturer,
            device.part_number) == ('VID2000', 'SN-A', 'Contoso', 'R-1')
    assert not device.wants_assembly


def test_an_assembly_does_not_override_what_the_device_says():
    device = models.Device()
    device.read_pcie_device({'SerialNumber': 'OWN', 'Model': 'M',
                             'Assembly': {'@odata.id': ASSEMBLY}})
    assert not device.wants_assembly
    device.read_assembly({'Assemblies': [{'Model': 'X',
                                          'SerialNumber': 'Y'}]})
    assert (device.model, device.serial) == ('M', 'OWN')


def test_no_assembly_link_wants_none():
    device = models.Device()
    device.read_pcie_device({'Model': 'M'})
    assert device.assembly_uris == [] and not device.wants_assembly
    # A link that is not one is ignored, not fatal.
    device.read_pcie_device({'Assembly': 'nowhere'})
    assert device.assembly_uris == []


@pytest.mark.parametrize('data', [[], {'Assemblies': 'x'}, {}])
def test_an_assembly_that_is_not_one(data):
    with pytest.raises(models.ParseError):
        models.Device().read_assembly(data)
