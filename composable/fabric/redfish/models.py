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

# ResourceBlockType values whose blocks carry a PCIe-like device. Compute
# and ComputerSystem blocks are the systems' own.
DEVICE_BLOCK_TYPES = frozenset(['Processor', 'Storage', 'Network',
                                'Expansion', 'IndependentResource'])
SYSTEM_BLOCK_TYPES = frozenset(['Compute', 'ComputerSystem'])

# The block properties that link its devices, in the order they are read.
MEMBER_PROPERTIES = ('Processors', 'Drives', 'Storage', 'NetworkInterfaces',
                     'EthernetInterfaces', 'SimpleStorage')

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
        member_uris = []
        for prop in MEMBER_PROPERTIES:
            member_uris += _links(data.get(prop), '%s %s' % (what, prop))
        return cls(uri, _str(data.get('Name')), types, state,
                   health(data.get('Status')), systems, zones, member_uris,
                   status_messages(data))

    @property
    def is_device(self):
        return bool(set(self.types) & DEVICE_BLOCK_TYPES
                    and not set(self.types) & SYSTEM_BLOCK_TYPES)


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
        if isinstance(actions, dict):
            for action in (cls.ADD, cls.REMOVE):
                entry = actions.get('#' + action)
                if isinstance(entry, dict) and _str(entry.get('target')):
                    targets[action] = entry['target']
        uuid = _str(data.get('UUID'))
        return cls(uri, _str(data.get('Name')), _str(data.get('HostName')),
                   uuid.lower() if uuid else None, blocks, targets)

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


class Device(object):
    """What a block's device resources (Processor, Drive,
    NetworkInterface, ...) and their PCIe function say about it."""

    def __init__(self):
        self.kind = None
        self.model = None
        self.manufacturer = None
        self.serial = None
        self.vendor_id = None
        self.product_id = None
        self.health = None
        self.function_uris = []
        self.device_uris = []
        self.adapter_uris = []

    def read_member(self, data):
        """A Processor, Drive, NetworkInterface or EthernetInterface."""
        data = _obj(data, 'block member')
        odata_type = str(data.get('@odata.type') or '')
        what = 'resource %s' % data.get('@odata.id')
        links = data.get('Links') or {}
        _obj(links, '%s Links' % what)
        if '.Processor' in odata_type or 'ProcessorType' in data:
            ptype = str(data.get('ProcessorType') or '')
            self.kind = self.kind or {'GPU': 'gpu', 'FPGA': 'fpga'}.get(
                ptype, 'pci')
            ident = data.get('ProcessorId')
            if isinstance(ident, dict):
                self.vendor_id = self.vendor_id or pci_id(
                    ident.get('VendorId'))
        elif '.Drive' in odata_type or 'Protocol' in data:
            self.kind = self.kind or (
                'nvme' if data.get('Protocol') == 'NVMe' else 'pci')
        elif 'Interface' in odata_type:
            self.kind = self.kind or 'nic'
        self._describe(data)
        self.function_uris += _links(links.get('PCIeFunctions'),
                                     '%s Links.PCIeFunctions' % what)
        self.function_uris += _links(links.get('PCIeFunction'),
                                     '%s Links.PCIeFunction' % what)
        self.device_uris += _links(links.get('PCIeDevice'),
                                   '%s Links.PCIeDevice' % what)
        self.device_uris += _links(links.get('PCIeDevices'),
                                   '%s Links.PCIeDevices' % what)
        self.adapter_uris += _links(links.get('NetworkAdapter'),
                                    '%s Links.NetworkAdapter' % what)

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
        if vendor and product:
            self.vendor_id, self.product_id = vendor, product
        self.kind = self.kind or _DEVICE_CLASS_KINDS.get(
            data.get('DeviceClass'))

    def _describe(self, data):
        self.model = self.model or _str(data.get('Model'))
        self.manufacturer = self.manufacturer or _str(
            data.get('Manufacturer'))
        self.serial = self.serial or _str(data.get('SerialNumber'))
        found = health(data.get('Status'))
        order = (None, 'ok', 'warning', 'critical')
        if order.index(found) > order.index(self.health):
            self.health = found
