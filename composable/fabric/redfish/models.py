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

"""The few Redfish resources the composition driver reads (DSP2050).

Each model is built from a resource's JSON by ``parse`` and keeps only what
the driver uses. A payload that is not the resource it should be raises
ParseError, which names the resource and what is wrong with it.
"""

import re

# CompositionStatus.CompositionState values the driver acts on.
UNUSED = 'Unused'
COMPOSING = 'Composing'
COMPOSED = 'Composed'
COMPOSED_AND_AVAILABLE = 'ComposedAndAvailable'
FAILED = 'Failed'
UNAVAILABLE = 'Unavailable'

# ResourceBlockType values of a system's own blocks.
SYSTEM_BLOCK_TYPES = frozenset(['Compute', 'ComputerSystem'])

# The block properties that link its members (DSP2050), in the order
# they are read, and the resource type each links.
MEMBER_PROPERTIES = (('Processors', 'Processor'), ('Drives', 'Drive'),
                     ('Storage', 'Storage'),
                     ('NetworkInterfaces', 'NetworkInterface'),
                     ('EthernetInterfaces', 'EthernetInterface'),
                     ('PCIeDevices', 'PCIeDevice'),
                     ('SimpleStorage', 'SimpleStorage'),
                     ('Memory', 'Memory'),
                     ('ComputerSystems', 'ComputerSystem'))

# ProcessorType -> device kind; other processors (CPU, Core, Thread) are
# a system's own.
_PROCESSOR_KINDS = {'GPU': 'gpu', 'FPGA': 'fpga', 'Accelerator': 'pci',
                    'DSP': 'pci', 'OEM': 'pci'}

_HEALTH = {'ok': 'ok', 'warning': 'warning', 'critical': 'critical'}
_PCI_ID = re.compile(r'^(?:0x)?([0-9a-f]{4})$')
_DEVICE_CLASS_KINDS = {
    'DisplayController': 'gpu',
    'MassStorageController': 'nvme',
    'NetworkController': 'nic',
    'ProcessingAccelerators': 'fpga',
}


class ParseError(ValueError):
    pass


def _obj(data, what):
    if not isinstance(data, dict):
        raise ParseError('%s is not a JSON object' % what)
    return data


def _uri(data, what):
    uri = data.get('@odata.id') if isinstance(data, dict) else None
    if not isinstance(uri, str) or not uri.startswith('/'):
        raise ParseError('%s has no @odata.id' % what)
    return uri.rstrip('/') or '/'


def _links(value, what):
    """URIs of a link or an array of links (absent: none)."""
    if value is None:
        return []
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        raise ParseError('%s is not a link or an array of links' % what)
    return [_uri(item, what) for item in value]


def _str(value):
    return value if isinstance(value, str) and value.strip() else None


def pci_id(value):
    """'0x10DE' or '10de' -> '10de'; anything else -> None."""
    if not isinstance(value, str):
        return None
    match = _PCI_ID.match(value.strip().lower())
    return match.group(1) if match else None


def health(status):
    """Status.Health as 'ok', 'warning' or 'critical' (None: unknown)."""
    value = status.get('Health') if isinstance(status, dict) else None
    return _HEALTH.get(str(value).lower()) if value else None


def status_messages(data):
    """The messages a resource gives about its state (Status.Conditions,
    Messages, @Message.ExtendedInfo)."""
    found = []
    status = data.get('Status') if isinstance(data, dict) else None
    sources = []
    if isinstance(status, dict):
        sources.append(status.get('Conditions'))
    if isinstance(data, dict):
        sources.append(data.get('Messages'))
        sources.append(data.get('@Message.ExtendedInfo'))
        error = data.get('error')
        if isinstance(error, dict):
            sources.append(error.get('@Message.ExtendedInfo'))
            if _str(error.get('message')):
                found.append(error['message'])
    for source in sources:
        if isinstance(source, list):
            for item in source:
                if isinstance(item, dict) and _str(item.get('Message')):
                    found.append(item['Message'])
    return found


def members(data, what='collection'):
    """The member URIs of a collection (``Members`` at its top level)."""
    data = _obj(data, what)
    if 'Members' not in data:
        raise ParseError('%s has no Members' % what)
    return _links(data['Members'], what + ' Members')


def page(data, what='collection'):
    """(member URIs, URI of the next page or None, Members@odata.count
    or None, {URI: member} of the members given in full ($expand)) of
    one page of a collection."""
    uris = members(data, what)
    full = {}
    for item in data['Members'] if isinstance(data['Members'], list) else []:
        if isinstance(item, dict) and len(item) > 1:
            full[_uri(item, what + ' Members')] = item
    following = data.get('Members@odata.nextLink')
    if isinstance(following, str) and following.startswith(('http://',
                                                            'https://')):
        # An absolute URL of the same service: its path and query.
        following = '/' + following.split('://', 1)[1].partition('/')[2]
    if following is not None and not (isinstance(following, str)
                                      and following.startswith('/')):
        raise ParseError('%s has a Members@odata.nextLink that is not a '
                         'path' % what)
    count = data.get('Members@odata.count')
    if isinstance(count, bool) or not isinstance(count, int):
        count = None
    return uris, following, count, full


class ResourceBlock(object):

    def __init__(self, uri, name, types, state, health, systems, zones,
                 member_uris, messages):
        self.uri = uri
        self.id = uri.rsplit('/', 1)[-1]
        self.name = name
        self.types = types
        self.state = state
        self.health = health
        self.systems = systems
        self.zones = zones
        self.member_uris = member_uris
        self.messages = messages

    @classmethod
    def parse(cls, data):
        data = _obj(data, 'resource block')
        uri = _uri(data, 'resource block')
        what = 'resource block %s' % uri
        types = data.get('ResourceBlockType')
        # Early services wrote a single string.
        if isinstance(types, str):
            types = [types]
        if (not isinstance(types, list)
                or not all(isinstance(t, str) for t in types)):
            raise ParseError('%s has no ResourceBlockType array' % what)
        comp = _obj(data.get('CompositionStatus'),
                    '%s CompositionStatus' % what)
        state = comp.get('CompositionState')
        if not _str(state):
            raise ParseError('%s has no CompositionState' % what)
        links = data.get('Links') or {}
        _obj(links, '%s Links' % what)
        systems = _links(links.get('ComputerSystems'),
                         '%s Links.ComputerSystems' % what)
        zones = _links(links.get('Zones'), '%s Links.Zones' % what)
        members = []
        for prop, kind in MEMBER_PROPERTIES:
            members += [(kind, link) for link in _links(
                data.get(prop), '%s %s' % (what, prop))]
        block = cls(uri, _str(data.get('Name')), types, state,
                    health(data.get('Status')), systems, zones,
                    [m[1] for m in members], status_messages(data))
        block.members = members
        block.reserved = comp.get('Reserved') is True
        block.sharing = comp.get('SharingCapable') is True
        status = data.get('Status')
        block.status_state = _str(status.get('State')) if isinstance(
            status, dict) else None
        return block

    @property
    def unavailable(self):
        """Why the service will not compose this block for anyone now
        (its state, a reservation, a disabled resource), or None."""
        if self.state == FAILED:
            return 'its composition failed%s' % (
                ': %s' % '; '.join(self.messages) if self.messages else '')
        if self.state == UNAVAILABLE:
            return 'the service marks its composition Unavailable'
        if self.state not in (UNUSED, COMPOSED, COMPOSED_AND_AVAILABLE):
            return 'its CompositionState is %s' % self.state
        if self.reserved:
            return 'another client reserved it (CompositionStatus.Reserved)'
        if self.status_state and self.status_state != 'Enabled':
            return 'its Status.State is %s' % self.status_state
        return None

    @property
    def is_device(self):
        """False for a system's own (Compute, ComputerSystem) blocks;
        what the others hold is told by their members."""
        return not set(self.types) & SYSTEM_BLOCK_TYPES


class ResourceZone(object):

    def __init__(self, uri, name, blocks):
        self.uri = uri
        self.name = name
        self.blocks = blocks

    @classmethod
    def parse(cls, data):
        data = _obj(data, 'resource zone')
        uri = _uri(data, 'resource zone')
        links = _obj(data.get('Links') or {}, 'resource zone %s Links' % uri)
        return cls(uri, _str(data.get('Name')),
                   _links(links.get('ResourceBlocks'),
                          'resource zone %s Links.ResourceBlocks' % uri))


class System(object):

    ADD = 'ComputerSystem.AddResourceBlock'
    REMOVE = 'ComputerSystem.RemoveResourceBlock'

    def __init__(self, uri, name, host_name, uuid, blocks, targets):
        self.uri = uri
        self.name = name
        self.host_name = host_name
        self.uuid = uuid
        self.blocks = blocks
        self.targets = targets

    @classmethod
    def parse(cls, data):
        data = _obj(data, 'computer system')
        uri = _uri(data, 'computer system')
        what = 'computer system %s' % uri
        links = _obj(data.get('Links') or {}, '%s Links' % what)
        blocks = _links(links.get('ResourceBlocks'),
                        '%s Links.ResourceBlocks' % what)
        targets = {}
        actions = data.get('Actions')
        offered = sorted(k.lstrip('#') for k in actions
                         if k.startswith('#')) if isinstance(
                             actions, dict) else []
        if isinstance(actions, dict):
            for action in (cls.ADD, cls.REMOVE):
                entry = actions.get('#' + action)
                if isinstance(entry, dict) and _str(entry.get('target')):
                    targets[action] = entry['target']
        uuid = _str(data.get('UUID'))
        system = cls(uri, _str(data.get('Name')), _str(data.get('HostName')),
                     uuid.lower() if uuid else None, blocks, targets)
        # The actions it advertises (none advertised: unknown).
        system.offered = offered
        system.system_type = _str(data.get('SystemType'))
        return system

    @property
    def expandable(self):
        """True when it offers both Add- and RemoveResourceBlock."""
        return self.ADD in self.targets and self.REMOVE in self.targets

    def target(self, action):
        """The action's target URI (the standard one if not advertised)."""
        return self.targets.get(action) or '%s/Actions/%s' % (self.uri,
                                                              action)

    def names(self):
        """Its Name and HostName, lower case, once each."""
        return set(n.lower() for n in (self.name, self.host_name) if n)

    def answers_to(self, name):
        """True when ``name`` is its Name or HostName (case does not
        matter)."""
        return bool(name) and name.lower() in self.names()


def resource_type(data, hint=None):
    """'Processor' of '#Processor.v1_22_0.Processor'; ``hint`` (the
    type the link promised) when the payload does not say."""
    odata_type = data.get('@odata.type') if isinstance(data, dict) else None
    if isinstance(odata_type, str) and odata_type.strip('#'):
        return odata_type.rsplit('.', 1)[-1]
    return hint


class Device(object):
    """What a block's members (Processor, Drive, Storage,
    NetworkInterface, PCIeDevice, ...) and their PCIe functions say about
    the device a host would be given.

    A block is pooled only when a member is a PCIe function a host can
    bind (a GPU, FPGA or accelerator, an NVMe drive, a NIC, a PCIe
    device) and the service gives its PCI vendor and device id; the
    other members (memory, CPUs, SAS/SATA drives, volumes, network
    settings without an adapter) are refused with the reason.
    """

    def __init__(self):
        self.kind = None
        self.model = None
        self.manufacturer = None
        self.serial = None
        self.vendor_id = None
        self.product_id = None
        self.part_number = None
        self.health = None
        self.bindable = 0
        self.refused = []
        self.function_uris = []
        self.device_uris = []
        self.adapter_uris = []
        self.function_collections = []
        # (type, URI) of members found through members (a Storage's
        # Drives).
        self.more = []
        # The Assembly resources of what was read, in that order: where
        # the resources themselves give no model or serial, the first
        # Assembly is read for them (models.Device.read_assembly).
        self.assembly_uris = []

    @property
    def not_poolable(self):
        """Why no host can be given this device, or None."""
        if not self.bindable:
            return '; '.join(self.refused) or 'it has no members'
        if not (self.vendor_id and self.product_id):
            return ('the service gives no PCI vendor and device id for '
                    'it (nor a bus address), so a compute node could not '
                    'find it once attached')
        return None

    def _refuse(self, what, why):
        self.refused.append('%s %s' % (what, why))

    def refuse(self, what, why):
        """Note a part that is no device a host can be given."""
        self._refuse(what, why)

    def read_pci_ids(self, ids):
        """(vendor, device, class code) a fabric endpoint gives itself
        (its PciId or a connected entity's EntityPciId)."""
        vendor, product, class_code = ids
        if vendor and product and not self.product_id:
            self.vendor_id, self.product_id = vendor, product
        self.kind = self.kind or class_code_kind(class_code)

    def read_member(self, data, hint=None):
        """One member of the block; ``hint``: the type its link
        promised."""
        data = _obj(data, 'block member')
        rtype = resource_type(data, hint)
        what = '%s %s' % (rtype or 'resource',
                          data.get('@odata.id') or data.get('Id') or '')
        links = data.get('Links') or {}
        _obj(links, '%s Links' % what)
        if rtype == 'Processor':
            ptype = str(data.get('ProcessorType') or '')
            kind = _PROCESSOR_KINDS.get(ptype)
            if kind is None:
                self._refuse(what, 'is a %s, part of a system, not a '
                                   'device a host can be given' %
                             (ptype or 'processor'))
                return
            self._bindable(kind)
            ident = data.get('ProcessorId')
            if isinstance(ident, dict):
                self.vendor_id = self.vendor_id or pci_id(
                    ident.get('VendorId'))
        elif rtype == 'Drive':
            protocol = str(data.get('Protocol') or '')
            if protocol != 'NVMe':
                self._refuse(what, 'is a %s drive, not a PCIe function a '
                                   'host can bind' % (protocol or
                                                      'non-NVMe'))
                return
            self._bindable('nvme')
        elif rtype == 'Storage':
            self.more += [('Drive', uri) for uri in _links(
                data.get('Drives'), '%s Drives' % what)]
            for controller in data.get('StorageControllers') or []:
                if isinstance(controller, dict):
                    self._function_links(controller.get('Links') or {},
                                         what)
            if not data.get('Drives'):
                self._refuse(what, 'holds no drives')
            self._describe(data, health_only=True)
            self._function_links(links, what)
            return
        elif rtype in ('NetworkInterface', 'EthernetInterface'):
            adapters = _links(links.get('NetworkAdapter'),
                              '%s Links.NetworkAdapter' % what)
            functions = data.get('NetworkDeviceFunctions')
            ndf = _links(links.get('NetworkDeviceFunctions'),
                         '%s Links.NetworkDeviceFunctions' % what)
            ndf += _links(links.get('NetworkDeviceFunction'),
                          '%s Links.NetworkDeviceFunction' % what)
            self.adapter_uris += adapters
            self.more += [('NetworkDeviceFunction', u) for u in ndf]
            if isinstance(functions, dict) and '@odata.id' in functions:
                self.function_collections.append(
                    ('NetworkDeviceFunction',
                     _uri(functions, '%s NetworkDeviceFunctions' % what)))
            elif not (adapters or ndf or links.get('PCIeFunction')
                      or links.get('PCIeFunctions')):
                self._refuse(what, 'leads to no network adapter or PCIe '
                                   'function (network settings, not a '
                                   'device)')
                return
            self._bindable('nic')
        elif rtype == 'NetworkDeviceFunction':
            self._bindable('nic')
            self._function_links(links, what)
            return
        elif rtype == 'PCIeDevice':
            self._bindable(None)
            collection = self.read_pcie_device(data)
            if collection:
                self.function_collections.append(('PCIeFunction',
                                                  collection))
            return
        elif rtype == 'SimpleStorage':
            self._refuse(what, 'is a tray of SAS/SATA devices, not a PCIe '
                               'function a host can bind')
            return
        elif rtype == 'Memory':
            self._refuse(what, 'is memory (a DIMM), not a PCIe function a '
                               'host can bind')
            return
        elif rtype == 'Volume':
            self._refuse(what, 'is a volume served by the storage, not a '
                               'PCIe function')
            return
        elif rtype == 'ComputerSystem':
            self._refuse(what, 'is a computer system')
            return
        elif rtype == 'PCIeFunction':
            if (data.get('DeviceClass') == 'MemoryController'
                    or is_cxl_memory_class(data.get('ClassCode'))):
                self._refuse(what, 'is a memory controller (CXL memory); '
                             + CXL_MEMORY_REASON)
                return
            self._bindable(None)
            self._describe(data, health_only=True)
            self.read_pcie_function(data)
            # Its device tells the model and serial.
            self.device_uris += _links(links.get('PCIeDevice'),
                                       '%s Links.PCIeDevice' % what)
            return
        elif rtype == 'NetworkAdapter':
            self._bindable('nic')
            self.read_adapter(data)
            return
        elif rtype == 'CXLLogicalDevice':
            semantics = data.get('SemanticsSupported') or []
            if 'CXLmem' in semantics and 'CXLcache' not in semantics:
                self._refuse(what, 'is CXL memory (a type 3 logical '
                                   'device); ' + CXL_MEMORY_REASON)
                return
            self._bindable(None)
            self._describe(data, health_only=True)
            self._function_links(links, what)
            return
        elif rtype in ('MemoryChunk', 'MemoryChunks', 'MemoryDomain'):
            self._refuse(what, 'is CXL memory; ' + CXL_MEMORY_REASON)
            return
        else:
            self._refuse(what, 'is of a kind the driver does not bind')
            return
        self._describe(data)
        self._function_links(links, what)
        self.device_uris += _links(links.get('PCIeDevice'),
                                   '%s Links.PCIeDevice' % what)
        self.device_uris += _links(links.get('PCIeDevices'),
                                   '%s Links.PCIeDevices' % what)

    def _bindable(self, kind):
        self.bindable += 1
        if kind:
            self.kind = self.kind or kind

    def _function_links(self, links, what):
        if not isinstance(links, dict):
            return
        self.function_uris += _links(links.get('PCIeFunctions'),
                                     '%s Links.PCIeFunctions' % what)
        self.function_uris += _links(links.get('PCIeFunction'),
                                     '%s Links.PCIeFunction' % what)

    def read_adapter(self, data):
        """A NetworkAdapter: its controllers link the PCIe devices."""
        data = _obj(data, 'network adapter')
        self._describe(data)
        for controller in data.get('Controllers') or []:
            if isinstance(controller, dict):
                links = controller.get('Links') or {}
                if isinstance(links, dict):
                    self.device_uris += _links(
                        links.get('PCIeDevices'), 'network adapter '
                        'Controllers Links.PCIeDevices')
                    self._function_links(links, 'network adapter')

    def read_pcie_device(self, data):
        """A PCIeDevice; returns its PCIeFunctions collection URI."""
        data = _obj(data, 'PCIe device')
        self._describe(data)
        functions = data.get('PCIeFunctions')
        if isinstance(functions, dict) and '@odata.id' in functions:
            return _uri(functions, 'PCIe device PCIeFunctions')
        return None

    def read_pcie_function(self, data):
        data = _obj(data, 'PCIe function')
        vendor = pci_id(data.get('VendorId'))
        product = pci_id(data.get('DeviceId'))
        if vendor and product and not self.product_id:
            self.vendor_id, self.product_id = vendor, product
        self.kind = self.kind or _DEVICE_CLASS_KINDS.get(
            data.get('DeviceClass')) or class_code_kind(
                data.get('ClassCode')) or 'pci'

    @property
    def wants_assembly(self):
        """True when the model or serial is unknown and an Assembly may
        tell it."""
        return bool(self.assembly_uris) and not (self.model and self.serial)

    def read_assembly(self, data):
        """An Assembly (its Assemblies entries: Model, SerialNumber,
        Vendor or Producer, PartNumber): fills in what the device's own
        resources left unknown, from the first entry that tells it (the
        first entry is the part itself, the others its sub-assemblies)."""
        data = _obj(data, 'assembly')
        entries = data.get('Assemblies')
        if not isinstance(entries, list):
            raise ParseError('assembly %s has no Assemblies array' %
                             data.get('@odata.id', ''))
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            self.model = self.model or _str(entry.get('Model'))
            self.serial = self.serial or _str(entry.get('SerialNumber'))
            self.manufacturer = (self.manufacturer
                                 or _str(entry.get('Vendor'))
                                 or _str(entry.get('Producer')))
            self.part_number = self.part_number or _str(
                entry.get('PartNumber'))

    def _describe(self, data, health_only=False):
        try:
            self.assembly_uris += [u for u in _links(
                data.get('Assembly'), 'Assembly')
                if u not in self.assembly_uris]
        except ParseError:
            # A bad link to an Assembly loses only what it would tell.
            pass
        if not health_only:
            self.model = self.model or _str(data.get('Model'))
            self.manufacturer = self.manufacturer or _str(
                data.get('Manufacturer'))
            self.serial = self.serial or _str(data.get('SerialNumber'))
        found = health(data.get('Status'))
        order = (None, 'ok', 'warning', 'critical')
        if order.index(found) > order.index(self.health):
            self.health = found


# The CollectionCapabilities use case of a Systems collection that
# composes new systems (DSP2050's specific composition).
COMPOSITION_USE_CASE = 'ComputerSystemComposition'
# The use case of one that composes systems from a description (so many
# processors, so much memory) and picks the blocks itself.
CONSTRAINED_USE_CASE = 'ComputerSystemConstrainedComposition'


class SystemComposition(object):
    """What a Systems collection says about composing systems by POST
    (its ``@Redfish.CollectionCapabilities`` and
    ``ResourceBlocks@Redfish.AllowableValues``) and, once its
    capabilities object is read (:meth:`read_capabilities`), whether a
    composed system's blocks may be changed afterwards."""

    def __init__(self, offered, capabilities_uri, constrained=False):
        self.offered = offered
        self.capabilities_uri = capabilities_uri
        self.constrained = constrained
        self.updatable = False

    @classmethod
    def parse(cls, data):
        data = _obj(data, 'computer system collection')
        capabilities_uri = None
        offered = constrained = False
        caps = data.get('@Redfish.CollectionCapabilities')
        entries = caps.get('Capabilities') if isinstance(caps, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict):
                continue
            if entry.get('UseCase') == CONSTRAINED_USE_CASE:
                constrained = True
            if entry.get('UseCase') != COMPOSITION_USE_CASE:
                continue
            offered = True
            try:
                capabilities_uri = _uri(entry.get('CapabilitiesObject'),
                                        'composition capabilities')
            except ParseError:
                capabilities_uri = None
            break
        links = data.get('Links')
        for where in (data, links if isinstance(links, dict) else {}):
            if isinstance(where.get('ResourceBlocks@Redfish.AllowableValues'),
                          list):
                offered = True
        return cls(offered, capabilities_uri, constrained)

    def read_capabilities(self, data):
        """The capabilities object: is Links.ResourceBlocks updatable
        after the system was composed?"""
        data = _obj(data, 'composition capabilities')
        links = data.get('Links')
        self.updatable = isinstance(links, dict) and links.get(
            'ResourceBlocks@Redfish.UpdatableAfterCreate') is True


def reserved_blocks(data):
    """The blocks a CompositionReservation holds."""
    data = _obj(data, 'composition reservation')
    return _links(data.get('ReservedResourceBlocks'),
                  'composition reservation ReservedResourceBlocks')


# ------------------------------------------------------------ fabrics
#
# DSP0268's fabric model: a Fabric holds Endpoints (each the fabric's
# view of what is plugged in: a host's root port or CPU as an initiator,
# a device as a target, with the resources it is in ConnectedEntities),
# Zones (which endpoints may talk to each other) and, on some services,
# Connections (an initiator given a target, CXL memory chunks among
# them).

# ZoneType values of zones that hold endpoints (absent: the same).
ENDPOINT_ZONE_TYPES = (None, 'ZoneOfEndpoints')
ZONE_OF_ZONES = 'ZoneOfZones'
DEFAULT_ZONE = 'Default'

# ConnectedEntities EntityType values that are the fabric's own parts or
# memory, never a device a host is given here (no GET needed to say so).
_FABRIC_PARTS = ('Switch', 'FabricBridge', 'Manager', 'Bridge',
                 'StorageExpander', 'RootComplex')
_MEMORY_ENTITIES = ('MemoryChunk', 'Memory')
CXL_MEMORY_REASON = 'CXL memory is pooled by a cxl memory pool'

# PCI base class (first byte of ClassCode) -> device kind, where a
# function gives no DeviceClass.
_CLASS_CODE_KINDS = {'01': 'nvme', '02': 'nic', '03': 'gpu', '12': 'fpga',
                     '0b': 'pci'}


def class_code_kind(value):
    """'0x030200' -> 'gpu'; None when it is not a class code the driver
    knows. Mass storage counts only as NVMe (subclass 08)."""
    if not isinstance(value, str):
        return None
    code = value.strip().lower()
    code = code[2:] if code.startswith('0x') else code
    if not re.match(r'^[0-9a-f]{6}$', code):
        return None
    if code[:2] == '01' and code[2:4] != '08':
        return None
    return _CLASS_CODE_KINDS.get(code[:2])


def is_cxl_memory_class(value):
    """True for the class code of a CXL memory device (05 02)."""
    code = value.strip().lower() if isinstance(value, str) else ''
    code = code[2:] if code.startswith('0x') else code
    return code[:4] == '0502'


def _status(data):
    status = data.get('Status')
    return (health(status),
            _str(status.get('State')) if isinstance(status, dict) else None)


class Fabric(object):

    def __init__(self, uri, fid, name, fabric_type, zones, endpoints,
                 connections):
        self.uri = uri
        self.id = fid
        self.name = name
        self.fabric_type = fabric_type
        self.zones = zones
        self.endpoints = endpoints
        self.connections = connections

    @classmethod
    def parse(cls, data):
        data = _obj(data, 'fabric')
        uri = _uri(data, 'fabric')

        def link(prop):
            value = data.get(prop)
            return _uri(value, 'fabric %s %s' % (uri, prop)) if isinstance(
                value, dict) else None

        return cls(uri, _str(data.get('Id')) or uri.rsplit('/', 1)[-1],
                   _str(data.get('Name')), _str(data.get('FabricType')),
                   link('Zones'), link('Endpoints'), link('Connections'))

    @property
    def zoned(self):
        """True when it has Zones and Endpoints to compose with."""
        return bool(self.zones and self.endpoints)

    def answers_to(self, ref):
        return ref.rstrip('/') in (self.uri, self.id)


class Entity(object):
    """One of an endpoint's ConnectedEntities."""

    def __init__(self, entity_type, role, link, pci):
        self.type = entity_type
        self.role = role
        self.link = link
        self.pci = pci

    @property
    def fabric_part(self):
        return self.type in _FABRIC_PARTS

    @property
    def memory(self):
        return self.type in _MEMORY_ENTITIES


def _pci_ids(value):
    """(vendor, device, class code) of a PciId object, or None."""
    if not isinstance(value, dict):
        return None
    found = (pci_id(value.get('VendorId')), pci_id(value.get('DeviceId')),
             _str(value.get('ClassCode')))
    return found if any(found) else None


class Endpoint(object):

    def __init__(self, uri, name, entities, zones, connections, health,
                 state, pci, has_zone_links):
        self.uri = uri
        self.name = name
        self.entities = entities
        self.zones = zones
        self.connections = connections
        self.health = health
        self.state = state
        self.pci = pci
        # False when the endpoint does not say which zones it is in
        # (only the zones then tell).
        self.has_zone_links = has_zone_links
        # The switch ports it is connected to or has (Links.ConnectedPorts
        # and Links.Ports).
        self.ports = []

    @property
    def switches(self):
        """The switches (@odata.id) of its ports and of the switches
        among its connected entities."""
        found = set(switch_of(p) for p in self.ports) - {None}
        found.update(e.link for e in self.entities
                     if e.type == 'Switch' and e.link)
        return found

    @classmethod
    def parse(cls, data):
        data = _obj(data, 'endpoint')
        uri = _uri(data, 'endpoint')
        what = 'endpoint %s' % uri
        entities = []
        raw = data.get('ConnectedEntities') or []
        if not isinstance(raw, list):
            raise ParseError('%s ConnectedEntities is not an array' % what)
        for item in raw:
            item = _obj(item, '%s ConnectedEntities member' % what)
            link = item.get('EntityLink')
            entities.append(Entity(
                _str(item.get('EntityType')), _str(item.get('EntityRole')),
                _uri(link, '%s EntityLink' % what) if link else None,
                _pci_ids(item.get('EntityPciId'))))
        links = _obj(data.get('Links') or {}, '%s Links' % what)
        state_health, state = _status(data)
        endpoint = cls(uri, _str(data.get('Name')), entities,
                       _links(links.get('Zones'), '%s Links.Zones' % what),
                       _links(links.get('Connections'),
                              '%s Links.Connections' % what),
                       state_health, state, _pci_ids(data.get('PciId')),
                       'Zones' in links)
        for prop in ('ConnectedPorts', 'Ports'):
            endpoint.ports += _links(links.get(prop),
                                     '%s Links.%s' % (what, prop))
        return endpoint

    def initiator_systems(self, systems_path):
        """The @odata.id of each computer system an initiator entity of
        this endpoint belongs to (a system, or a processor or memory of
        one: /redfish/v1/Systems/<id>/...)."""
        prefix = systems_path.rstrip('/') + '/'
        found = []
        for entity in self.entities:
            if entity.role not in ('Initiator', 'Both') or not entity.link:
                continue
            if entity.link.startswith(prefix):
                system = prefix + entity.link[len(prefix):].split('/')[0]
                if system not in found:
                    found.append(system)
        return found

    def targets(self):
        """The entities a host would be given (role Target or Both, or
        no role)."""
        return [e for e in self.entities
                if e.role in (None, 'Target', 'Both')]


def switch_of(uri):
    """The switch of a switch port's @odata.id
    (``.../Switches/<id>/Ports/<port>`` -> ``.../Switches/<id>``), or
    None for any other port."""
    head, sep, _ = uri.partition('/Ports/')
    if not sep or '/Switches/' not in head:
        return None
    return head


class FabricZone(object):

    def __init__(self, uri, name, zone_type, endpoints, contains,
                 contained_by, allowed, targets):
        self.uri = uri
        self.name = name
        self.zone_type = zone_type
        self.endpoints = endpoints
        self.contains = contains
        self.contained_by = contained_by
        # Links.Endpoints@Redfish.AllowableValues: the endpoints the zone
        # may be given (None: it does not say).
        self.allowed = allowed
        # The action targets it offers (Zone.AddEndpoint and so on).
        self.targets = targets
        # Links.InvolvedSwitches: the switches its endpoints are zoned on.
        self.switches = []

    @classmethod
    def parse(cls, data):
        data = _obj(data, 'zone')
        uri = _uri(data, 'zone')
        what = 'zone %s' % uri
        links = _obj(data.get('Links') or {}, '%s Links' % what)
        allowed = links.get('Endpoints@Redfish.AllowableValues')
        if allowed is not None:
            allowed = _links(allowed, '%s Links.Endpoints@Redfish.'
                                      'AllowableValues' % what)
        actions = data.get('Actions')
        targets = {}
        if isinstance(actions, dict):
            for key, entry in actions.items():
                if isinstance(entry, dict) and _str(entry.get('target')):
                    targets[key.lstrip('#')] = entry['target']
        zone = cls(uri, _str(data.get('Name')), _str(data.get('ZoneType')),
                   _links(links.get('Endpoints'), '%s Links.Endpoints' % what),
                   _links(links.get('ContainsZones'),
                          '%s Links.ContainsZones' % what),
                   _links(links.get('ContainedByZones'),
                          '%s Links.ContainedByZones' % what),
                   allowed, targets)
        zone.switches = _links(links.get('InvolvedSwitches'),
                               '%s Links.InvolvedSwitches' % what)
        return zone

    @property
    def holds_endpoints(self):
        return self.zone_type in ENDPOINT_ZONE_TYPES


class FabricConnection(object):

    def __init__(self, uri, initiators, targets):
        self.uri = uri
        self.initiators = initiators
        self.targets = targets

    @classmethod
    def parse(cls, data):
        data = _obj(data, 'connection')
        uri = _uri(data, 'connection')
        what = 'connection %s' % uri
        links = _obj(data.get('Links') or {}, '%s Links' % what)
        return cls(uri, _links(links.get('InitiatorEndpoints'),
                               '%s Links.InitiatorEndpoints' % what),
                   _links(links.get('TargetEndpoints'),
                          '%s Links.TargetEndpoints' % what))
