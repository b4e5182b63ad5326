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

"""A small Redfish composition service (DSP2050) for tests and DevStack.

It serves a ServiceRoot with a SessionService, a CompositionService with
ResourceBlocks and ResourceZones, expandable ComputerSystems (one per
compute host) and a Chassis that holds the PCIe devices and functions the
blocks' Processors, Drives and NetworkInterfaces lead to. Systems grow
and shrink with ``ComputerSystem.AddResourceBlock`` and
``ComputerSystem.RemoveResourceBlock``; a block goes ``Composing`` ->
``Composed`` (after ``compose_delay`` seconds) and back to ``Unused``.

With ``composition`` ``specific`` the service composes whole systems
instead (DSP2050's specific composition): its systems offer only
``ComputerSystem.Reset``, the Systems collection advertises a
``ComputerSystemComposition`` capability, ``POST /redfish/v1/Systems``
with ``Links.ResourceBlocks`` composes a new system (201 and its
``Location``, or 202 and a task monitor) and ``DELETE`` of a system
returns its blocks to the pool. With ``updatable`` the blocks of a
composed system may also be changed by ``PATCH`` of its
``Links.ResourceBlocks``.

With a ``fabric`` (the ``zones`` profiles) it is a PCIe/CXL fabric
manager instead: no CompositionService, and /redfish/v1/Fabrics/CXL with
a switch, an initiator endpoint per system, a target endpoint per PCIe
device (and per CXL memory device), zones of endpoints and Connections.
A device is given to a system by ``PATCH`` of the system's zone's
``Links.Endpoints`` (``binding`` ``zones``; with ``more_zones`` a host
has a second zone, ``Y-<host>``, that may be given other devices) or by
``POST`` of a Connection from its initiator (``binding``
``connections``, one zone of every endpoint); ``DELETE`` of the
connection takes it back.

With ``cxl`` (the ``cxl`` profile) it is a CXL fabric manager composing
memory, in the shapes of DMTF's public-cxl mockups: a fabric CXL with
one switch, a host port endpoint per system (a Processor initiator), a
target endpoint per CXL memory device (its logical device, with a
GCXLID), zones of endpoints, and each device's capacity as a memory
domain of its chassis. A client makes a chunk (``POST`` to the domain's
MemoryChunks, refused when the domain has not that much free) and
connects it to a host port (``POST`` of a Connection of ConnectionType
Memory with MemoryChunkInfo); ``DELETE`` takes either back (a chunk in
a connection is refused). :meth:`Emulator.refuse_cxl` makes the service
refuse chunk, connection or delete requests with a message.

Every GET answers an ETag; a POST to an action with a stale ``If-Match``
is answered 412. Everything but the service root, ``$metadata``, the
OData service document and the login needs an ``X-Auth-Token`` from
``POST /redfish/v1/SessionService/Sessions``.

A system may have a backend (:meth:`Emulator.set_backend`) that makes a
composition real: its ``compose(block_id, block)`` is called when a block
is added to the system and its ``decompose(block_id, block)`` when it is
removed (tests/functional/compute_host/hotplug.py hot-plugs emulated PCIe
functions into a libvirt domain). A block the backend could not compose
ends ``Failed``, with the backend's reason as its message; a removal the
backend could not do is answered 500 and changes nothing.

Faults are injected with :meth:`Emulator.inject` (``delay``, ``status``,
``drop``, ``412``) and :meth:`Emulator.set_block_fault` (``stuck``,
``fail``); :meth:`Emulator.expire_sessions` logs every client out.
:attr:`Emulator.requests` records what was asked, :meth:`Emulator.observe`
calls back on every request and :meth:`Emulator.locked` hands the state
over for changes.

Run standalone::

    python -m tests.functional.fabric.redfish_emulator --port 8000 \\
        [--config inventory.json | --profile duplicate-names]
"""

import argparse
import base64
import contextlib
import copy
import hashlib
import itertools
import json
import socket
import socketserver
import sys
import threading
import time
from wsgiref import simple_server

ROOT = '/redfish/v1'
BLOCKS = ROOT + '/CompositionService/ResourceBlocks'
ZONES = ROOT + '/CompositionService/ResourceZones'
SYSTEMS = ROOT + '/Systems'
SESSIONS = ROOT + '/SessionService/Sessions'
CHASSIS = ROOT + '/Chassis'
POOL = CHASSIS + '/Pool'
MONITORS = ROOT + '/TaskService/TaskMonitors'
FABRICS = ROOT + '/Fabrics'
CAPABILITIES = SYSTEMS + '/Capabilities'

ADD = 'ComputerSystem.AddResourceBlock'
REMOVE = 'ComputerSystem.RemoveResourceBlock'

# The schema versions the resources are written against.
TYPES = {
    'ServiceRoot': 'ServiceRoot.v1_20_0',
    'CompositionService': 'CompositionService.v1_2_3',
    'ResourceBlock': 'ResourceBlock.v1_4_3',
    'Zone': 'Zone.v1_6_3',
    'ComputerSystem': 'ComputerSystem.v1_27_0',
    'SessionService': 'SessionService.v1_2_0',
    'Session': 'Session.v1_8_0',
    'Chassis': 'Chassis.v1_28_0',
    'PCIeDevice': 'PCIeDevice.v1_21_0',
    'PCIeFunction': 'PCIeFunction.v1_7_0',
    'Processor': 'Processor.v1_22_0',
    'Drive': 'Drive.v1_22_0',
    'NetworkInterface': 'NetworkInterface.v1_2_3',
    'NetworkAdapter': 'NetworkAdapter.v1_14_0',
    'Storage': 'Storage.v1_15_0',
    'Memory': 'Memory.v1_17_0',
    'Fabric': 'Fabric.v1_4_0',
    'Endpoint': 'Endpoint.v1_8_2',
    'Connection': 'Connection.v1_4_0',
    'Switch': 'Switch.v1_10_0',
    'MemoryChunks': 'MemoryChunks.v1_6_2',
    'Assembly': 'Assembly.v1_6_1',
}
COLLECTIONS = ('ResourceBlockCollection', 'ZoneCollection',
               'ComputerSystemCollection', 'SessionCollection',
               'ChassisCollection', 'PCIeDeviceCollection',
               'PCIeFunctionCollection', 'NetworkAdapterCollection',
               'FabricCollection', 'EndpointCollection',
               'ConnectionCollection', 'SwitchCollection',
               'ProcessorCollection')
SCHEMA_BASE = 'http://redfish.dmtf.org/schemas/v1/'

# Blocks whose members a host cannot be given as a PCIe function:
# kind -> (ResourceBlockType, member list property, member kind).
UNBINDABLE = {
    'sas': ('Storage', 'Drives', 'Drive'),
    'template': ('Network', 'NetworkInterfaces', 'NetworkInterface'),
    'memory': ('Memory', 'Memory', 'Memory'),
}

# kind -> (ResourceBlockType, member list property, member kind, class)
KINDS = {
    'gpu': ('Processor', 'Processors', 'Processor', 'DisplayController'),
    'fpga': ('Processor', 'Processors', 'Processor',
             'ProcessingAccelerators'),
    'nvme': ('Storage', 'Drives', 'Drive', 'MassStorageController'),
    'nic': ('Network', 'NetworkInterfaces', 'NetworkInterface',
            'NetworkController'),
}

DEFAULT_CONFIG = {
    'username': 'admin',
    'password': 'redfish-secret',
    'compose_delay': 0.2,
    'zones': [{'id': '1', 'name': 'Rack 1 zone A'},
              {'id': '2', 'name': 'Rack 1 zone B'}],
    'systems': [
        {'id': 'compute-0', 'name': 'compute-0',
         'uuid': '0c4a8a3c-59f3-4a6e-9f0b-2b7d1c1f0a00', 'zones': ['1']},
        {'id': 'compute-1', 'name': 'compute-1',
         'uuid': '0c4a8a3c-59f3-4a6e-9f0b-2b7d1c1f0a01',
         'zones': ['1', '2']},
    ],
    'blocks': [
        {'id': 'GPU0', 'kind': 'gpu', 'vendor_id': '10de',
         'device_id': '2330', 'serial': 'GPU-SN-0000',
         'model': 'H100 80GB', 'manufacturer': 'NVIDIA', 'zones': ['1']},
        {'id': 'GPU1', 'kind': 'gpu', 'vendor_id': '10de',
         'device_id': '2330', 'serial': 'GPU-SN-0001',
         'model': 'H100 80GB', 'manufacturer': 'NVIDIA', 'zones': ['2']},
        {'id': 'NVMe0', 'kind': 'nvme', 'vendor_id': '144d',
         'device_id': 'a824', 'serial': 'NVME-SN-0000',
         'model': 'PM1733', 'manufacturer': 'Samsung', 'zones': ['1']},
        {'id': 'NIC0', 'kind': 'nic', 'vendor_id': '15b3',
         'device_id': '101d', 'serial': 'NIC-SN-0000',
         'model': 'ConnectX-6 Dx', 'manufacturer': 'Mellanox',
         'zones': ['1', '2'], 'health': 'Warning'},
    ],
}


def _profile(changes, **top):
    """The default inventory with ``changes`` (key -> new value)."""
    config = copy.deepcopy(DEFAULT_CONFIG)
    config.update(copy.deepcopy(changes))
    config.update(top)
    return config


# Inventories shaped like real services (written from the shapes of
# DMTF's public mockups and the DSP2050 examples; none is a copy).
PROFILES = {
    # Expandable systems, one per compute host, names unique.
    'expandable': DEFAULT_CONFIG,
    # Sleds of a chassis: every system has the chassis' HostName, two
    # share one Name; only @odata.id and UUID tell them apart.
    'duplicate-names': _profile({
        'zones': [{'id': '1', 'name': 'Chassis zone'}],
        'systems': [
            {'id': 'Sled-1', 'name': 'Sled-5', 'host_name': 'chassis-a',
             'uuid': '7a3e0c1e-0b7e-4b53-9d1e-5d1f6a2f0001',
             'zones': ['1']},
            {'id': 'Sled-2', 'name': 'Sled-5', 'host_name': 'chassis-a',
             'uuid': '7a3e0c1e-0b7e-4b53-9d1e-5d1f6a2f0002',
             'zones': ['1']},
            {'id': 'Sled-3', 'name': 'Sled-3', 'host_name': 'chassis-a',
             'uuid': '7a3e0c1e-0b7e-4b53-9d1e-5d1f6a2f0003',
             'zones': ['1']}],
        'blocks': [
            {'id': 'GPU0', 'kind': 'gpu', 'vendor_id': '10de',
             'device_id': '20b5', 'serial': 'GPU-SN-1000',
             'model': 'A100 80GB', 'manufacturer': 'NVIDIA',
             'zones': ['1']},
            {'id': 'GPU1', 'kind': 'gpu', 'vendor_id': '10de',
             'device_id': '20b5', 'serial': 'GPU-SN-1001',
             'model': 'A100 80GB', 'manufacturer': 'NVIDIA',
             'zones': ['1']}]}),
    # An NVMe appliance whose blocks hold Storage -> Drives (the PCIe
    # ids on the storage controller), next to blocks no host can be
    # given: SAS drives, network settings, memory, and a GPU the service
    # gives no PCIe ids for.
    'storage-appliance': _profile({
        'blocks': [
            {'id': 'NVMe0', 'kind': 'nvme', 'shape': 'storage',
             'vendor_id': '144d', 'device_id': 'a80a',
             'serial': 'S64FNE0R000001', 'model': 'PM9A3 3.84TB',
             'manufacturer': 'Samsung', 'zones': ['1']},
            {'id': 'NVMe1', 'kind': 'nvme', 'shape': 'storage',
             'vendor_id': '144d', 'device_id': 'a80a',
             'serial': 'S64FNE0R000002', 'model': 'PM9A3 3.84TB',
             'manufacturer': 'Samsung', 'zones': ['1', '2']},
            {'id': 'SAS0', 'kind': 'sas', 'model': 'AL15SEB120N',
             'serial': 'SAS-SN-0000', 'zones': ['1']},
            {'id': 'VLAN20', 'kind': 'template', 'zones': ['1']},
            {'id': 'DIMM0', 'kind': 'memory', 'zones': ['1']},
            {'id': 'GPU9', 'kind': 'gpu', 'no_ids': True,
             'model': 'Workstation GPU', 'zones': ['1']}]}),
    # Devices whose own resources (Processor, PCIeDevice, NetworkAdapter)
    # give no model or serial number but link the device's Assembly,
    # whose entries (the board, then its parts) have them.
    'assemblies': _profile({
        'blocks': [
            dict(DEFAULT_CONFIG['blocks'][0], assembly=True,
                 part_number='900-21010-0000-000'),
            dict(DEFAULT_CONFIG['blocks'][1]),
            dict(DEFAULT_CONFIG['blocks'][2]),
            dict(DEFAULT_CONFIG['blocks'][3], assembly=True,
                 part_number='MCX623106AN-CDAT')]}),
    # A service without a SessionService: HTTP Basic only.
    'no-sessions': _profile({}, sessions=False),
    # Every collection in pages of two members.
    'paged': _profile({}, page_size=2),
    # Collections give their members in full with $expand=., in pages.
    'expand': _profile({}, expand=True, page_size=3),
    # Blocks the service will not give out: a failed and an unavailable
    # composition (health still OK), one another client reserved, one
    # disabled, one shared by two systems, one composed into a system
    # that is no compute host.
    'states': _profile({
        'systems': DEFAULT_CONFIG['systems'] + [
            {'id': 'render-7', 'name': 'render-7',
             'uuid': '0c4a8a3c-59f3-4a6e-9f0b-2b7d1c1f0a07',
             'zones': ['1']},
            {'id': 'fixed-0', 'name': 'fixed-0', 'expandable': False,
             'uuid': '0c4a8a3c-59f3-4a6e-9f0b-2b7d1c1f0a08',
             'zones': ['1']}],
        'blocks': [
            dict(DEFAULT_CONFIG['blocks'][0]),
            dict(DEFAULT_CONFIG['blocks'][3]),
            dict(DEFAULT_CONFIG['blocks'][0], id='GPU-Failed',
                 state='Failed', serial='GPU-SN-F'),
            dict(DEFAULT_CONFIG['blocks'][0], id='GPU-Unavailable',
                 state='Unavailable', serial='GPU-SN-U'),
            dict(DEFAULT_CONFIG['blocks'][0], id='GPU-Reserved',
                 reserved=True, serial='GPU-SN-R'),
            dict(DEFAULT_CONFIG['blocks'][0], id='GPU-Disabled',
                 status_state='Disabled', serial='GPU-SN-D'),
            dict(DEFAULT_CONFIG['blocks'][2], id='NVMe-Shared',
                 sharers=['compute-0', 'compute-1']),
            dict(DEFAULT_CONFIG['blocks'][0], id='GPU-Foreign',
                 system='render-7', serial='GPU-SN-X')]}),
    # DSP2050's specific composition: systems are composed whole from a
    # compute block and device blocks (POST /redfish/v1/Systems) and
    # decomposed with DELETE; they offer only Reset. The compute blocks
    # carry the servers' SMBIOS UUIDs, so a system composed again from
    # the same compute block keeps its UUID.
    'specific': _profile({}, composition='specific'),
    # A PCIe/CXL fabric manager (DSP0268's fabric model with CXL's
    # additions): no CompositionService; /redfish/v1/Fabrics/CXL has a
    # switch, an initiator endpoint per host (its CPU), target endpoints
    # of two GPUs, a NIC and a CXL memory device, and a zone of endpoints
    # per host whose Links.Endpoints@Redfish.AllowableValues say which
    # targets it may be given. A device is given to a host by a PATCH of
    # the host zone's Links.Endpoints (If-Match).
    'zones': _profile({
        'zones': [],
        'blocks': [dict(DEFAULT_CONFIG['blocks'][0], zones=[]),
                   dict(DEFAULT_CONFIG['blocks'][1], zones=[]),
                   dict(DEFAULT_CONFIG['blocks'][3], zones=[],
                        health='OK')]},
        fabric={'id': 'CXL', 'binding': 'zones',
                'cxl_memory': ['CXL0'],
                'reach': {'compute-0': ['GPU0', 'NIC0', 'CXL0'],
                          'compute-1': ['GPU1', 'NIC0', 'CXL0']}}),
    # The same, with zones whose Links.Endpoints are read-only (as
    # DSP0268's Zone schema has them): a device joins and leaves a host's
    # zone by the zone's Zone.AddEndpoint and Zone.RemoveEndpoint actions
    # (Zone v1_5_0), with the zone's and the endpoint's ETags.
    'zones-actions': _profile({
        'zones': [],
        'blocks': [dict(DEFAULT_CONFIG['blocks'][0], zones=[]),
                   dict(DEFAULT_CONFIG['blocks'][1], zones=[]),
                   dict(DEFAULT_CONFIG['blocks'][3], zones=[],
                        health='OK')]},
        fabric={'id': 'CXL', 'binding': 'zones', 'zone_actions': True,
                'cxl_memory': ['CXL0'],
                'reach': {'compute-0': ['GPU0', 'NIC0', 'CXL0'],
                          'compute-1': ['GPU1', 'NIC0', 'CXL0']}}),
    # The same devices on a fabric that has neither host zones nor
    # connections: a client makes a zone of a host's initiator and a
    # device's target (POST to Zones) and deletes it; the zones' endpoints
    # cannot be changed (Links.Endpoints read-only).
    'zones-created': _profile({
        'zones': [],
        'blocks': [dict(DEFAULT_CONFIG['blocks'][0], zones=[]),
                   dict(DEFAULT_CONFIG['blocks'][1], zones=[]),
                   dict(DEFAULT_CONFIG['blocks'][3], zones=[],
                        health='OK')]},
        fabric={'id': 'CXL', 'binding': 'create', 'cxl_memory': ['CXL0']}),
    # The same devices on a fabric that connects endpoints instead: one
    # zone of every endpoint (every host reaches every device) and a
    # device given to a host by POST of a Connection from the host's
    # initiator to the device's target endpoint, taken back by DELETE.
    'zones-connections': _profile({
        'zones': [],
        'blocks': [dict(DEFAULT_CONFIG['blocks'][0], zones=[]),
                   dict(DEFAULT_CONFIG['blocks'][1], zones=[]),
                   dict(DEFAULT_CONFIG['blocks'][3], zones=[],
                        health='OK')]},
        fabric={'id': 'CXL', 'binding': 'connections',
                'cxl_memory': ['CXL0']}),
}

# A CXL fabric manager (the shapes of DMTF's public-cxl mockups, written
# anew): two memory devices of 2 GiB behind one switch, chunks of 256 MiB
# steps made on demand. Zone 1 joins both hosts' ports and CXLMem0; zone
# 2 joins compute-1's port and CXLMem1, which holds 512 MiB of someone
# else's (a chunk connected to compute-1 by connection 12).
PROFILES['cxl'] = _profile({
    'zones': [], 'blocks': []},
    cxl={'fabric_id': 'CXL',
         'devices': [
             {'id': 'CXLMem0', 'size_mb': 2048,
              'gcxlid': '4C-1D-96-FF-FE-DD-D8-35:0001'},
             {'id': 'CXLMem1', 'size_mb': 2048,
              'gcxlid': '4C-1D-96-FF-FE-DD-D8-36:0001',
              'chunks': [{'id': '1', 'size_mb': 512,
                          'name': 'Memory Chunk 1',
                          'connection': ('12', 'compute-1')}]}],
         'zones': {'1': ['compute-0', 'compute-1', 'CXLMem0'],
                   '2': ['compute-1', 'CXLMem1']},
         'min_mb': 256, 'increment_mb': 256, 'creation': True})


class _Drop(Exception):
    """Close the connection without an answer."""


def _link(uri):
    return {'@odata.id': uri}


def _pcie_id(value):
    value = str(value or '0000').lower()
    if value.startswith('0x'):
        value = value[2:]
    return '0x' + value.zfill(4).upper()


class Emulator(object):
    """The service's state and its WSGI application."""

    def __init__(self, config=None):
        config = copy.deepcopy(config or DEFAULT_CONFIG)
        self.username = config.get('username', 'admin')
        self.password = config.get('password', 'redfish-secret')
        self.compose_delay = float(config.get('compose_delay', 0.2))
        # > 0: actions answer 202 and their monitor answers 202 that many
        # times before the final answer.
        self.task_polls = int(config.get('task_polls', 0))
        self.session_timeout = int(config.get('session_timeout', 1800))
        # False: no SessionService; clients use HTTP Basic.
        self.session_service = bool(config.get('sessions', True))
        # > 0: collections answer that many members a page, with
        # Members@odata.nextLink to the next.
        self.page_size = int(config.get('page_size', 0))
        # True: collections answer $expand=. (members in full) and the
        # service root says so; otherwise $expand is refused.
        self.expand = bool(config.get('expand', False))
        # 'specific': systems are composed by POST /redfish/v1/Systems and
        # decomposed by DELETE, not grown by actions; 'constrained': the
        # Systems collection only advertises composition from a
        # description (and composes nothing).
        self.composition = config.get('composition', 'expandable')
        if self.composition not in ('expandable', 'specific',
                                    'constrained'):
            raise ValueError('composition must be expandable, specific or '
                             'constrained')
        # With specific composition: a composed system's blocks may be
        # changed by PATCH of its Links.ResourceBlocks.
        self.updatable = bool(config.get('updatable', False))
        # A fabric of endpoints and zones (the 'zones' profiles): the
        # service then has no CompositionService.
        self.fabric = copy.deepcopy(config.get('fabric'))
        if self.fabric is not None:
            self.fabric.setdefault('id', 'CXL')
            self.fabric.setdefault('binding', 'zones')
            self.fabric.setdefault('cxl_memory', [])
            self.fabric.setdefault('reach', None)
            # host (system id) -> device ids in its zone.
            self.fabric['given'] = {
                str(s['id']): [] for s in config.get('systems', [])}
            # host (system id) -> the devices a second zone of the host
            # (Y-<host>) may be given, and those it holds.
            self.fabric.setdefault('more_zones', {})
            self.fabric['given_more'] = {
                sid: [] for sid in self.fabric['more_zones']}
            # connection id -> (system id, device id).
            self.fabric['connections'] = {}
            # zone id -> (system id, device id) of the zones a client
            # made (binding 'create').
            self.fabric['created'] = {}
        # A CXL fabric manager composing memory (the 'cxl' profile).
        self.cxl = copy.deepcopy(config.get('cxl'))
        if self.cxl is not None:
            self._cxl_setup(config)
        self.lock = threading.RLock()
        self.requests = []
        self.sessions = {}
        self.faults = []
        self.monitors = {}
        self._observers = []
        self.backends = {}
        self._revisions = {}
        self._ids = itertools.count(1)
        self.zones = {}
        for zone in config.get('zones', []):
            self.zones[str(zone['id'])] = {
                'name': zone.get('name') or 'Zone %s' % zone['id']}
        self.systems = {}
        self.blocks = {}
        for system in config.get('systems', []):
            sid = str(system['id'])
            self.systems[sid] = {
                'name': system.get('name') or sid,
                'host_name': system.get('host_name', system.get('name')),
                'uuid': system.get('uuid'),
                # False: a system that only resets (its service composes
                # new systems instead of growing them).
                'expandable': (system.get('expandable', True)
                               and self.composition == 'expandable'),
                'blocks': ['%s-Compute' % sid]}
            self.blocks['%s-Compute' % sid] = {
                'kind': 'compute', 'zones': [str(z) for z in
                                             system.get('zones', [])],
                'state': 'Composed', 'system': sid, 'health': 'OK',
                'uuid': system.get('uuid'),
                'pending': None, 'fault': None}
        for block in config.get('blocks', []):
            bid = str(block['id'])
            if block.get('kind') not in KINDS and (
                    block.get('kind') not in UNBINDABLE):
                raise ValueError('block %s: kind must be one of %s' %
                                 (bid, ', '.join(sorted(
                                     list(KINDS) + list(UNBINDABLE)))))
            entry = dict(block)
            entry.update({
                'zones': [str(z) for z in block.get('zones', [])],
                'state': 'Unused', 'system': None,
                'health': block.get('health', 'OK'),
                'configured_health': block.get('health', 'OK'),
                'pending': None, 'fault': None, 'message': None})
            self.blocks[bid] = entry
            if block.get('system'):
                self._attach(bid, str(block['system']))
                entry['state'] = 'Composed'
            # A shared block: composed into every one of these systems.
            entry['sharers'] = [str(x) for x in block.get('sharers', [])]
            for sid in entry['sharers']:
                self.systems[sid]['blocks'].append(bid)
            if entry['sharers']:
                entry['state'] = 'ComposedAndAvailable'
            # A state the service put the block in ('Failed',
            # 'Unavailable') stays until a test changes it.
            if block.get('state'):
                entry['state'] = block['state']

    # ------------------------------------------------------ test hooks

    @contextlib.contextmanager
    def locked(self):
        """Hold the lock and hand over the emulator to read or change."""
        with self.lock:
            self._advance()
            yield self

    def observe(self, callback):
        """Call ``callback(record)`` for every request, before answering.

        ``record`` is a dict with method, path, headers and body."""
        self._observers.append(callback)

    def inject(self, kind, method=None, path=None, count=1, seconds=0,
               code=503, body=None):
        """Answer the next ``count`` matching requests with a fault.

        ``kind``: ``delay`` (wait ``seconds``, then answer as usual),
        ``status`` (answer ``code``), ``drop`` (close the connection) or
        ``412`` (a concurrent change: the target's ETag changes and the
        request is refused) or ``garbage`` (answer 200 with ``body``, text
        that is not JSON unless given). ``path`` matches a substring of
        the path."""
        if kind not in ('delay', 'status', 'drop', '412', 'garbage'):
            raise ValueError('unknown fault %s' % kind)
        with self.lock:
            self.faults.append({'kind': kind, 'method': method,
                                'path': path, 'count': count,
                                'seconds': seconds, 'code': code,
                                'body': body})

    def set_block_fault(self, block_id, fault, message=None):
        """``stuck``: the block stays Composing; ``fail``: the next
        composition ends Failed; None: no fault."""
        with self.lock:
            self.blocks[block_id]['fault'] = fault
            self.blocks[block_id]['fault_message'] = (
                message or 'PCIe link training failed on the fabric port')

    def set_backend(self, system_id, backend):
        """Compose the system's blocks through ``backend`` (None: only in
        the emulator's state)."""
        with self.lock:
            if backend is None:
                self.backends.pop(system_id, None)
            else:
                self.backends[system_id] = backend

    def expire_sessions(self):
        with self.lock:
            self.sessions.clear()

    def actions(self):
        """The recorded action requests."""
        with self.lock:
            return [r for r in self.requests if '/Actions/' in r['path']]

    # ---------------------------------------------------------- state

    def _bump(self, uri):
        self._revisions[uri] = self._revisions.get(uri, 0) + 1

    def _attach(self, bid, sid):
        self.blocks[bid]['system'] = sid
        self.systems[sid]['blocks'].append(bid)
        self._bump(SYSTEMS + '/' + sid)

    def _detach(self, bid):
        sid = self.blocks[bid]['system']
        if sid is not None and bid in self.systems[sid]['blocks']:
            self.systems[sid]['blocks'].remove(bid)
            self._bump(SYSTEMS + '/' + sid)
        self.blocks[bid]['system'] = None

    def _advance(self):
        now = time.monotonic()
        for block in self.blocks.values():
            pending = block.get('pending')
            if pending and pending[0] <= now:
                block['pending'] = None
                block['state'] = pending[1]
                if pending[1] == 'Failed':
                    block['health'] = 'Critical'
                    block['message'] = block.get('fault_message')

    def _block_zones_of_system(self, sid):
        # The zones of the system's own block: the blocks added to it
        # do not widen them.
        zones = set()
        for bid in self.systems[sid]['blocks']:
            if self.blocks[bid]['kind'] == 'compute':
                zones.update(self.blocks[bid]['zones'])
        return zones

    # ------------------------------------------------------ resources

    def _render(self, path):
        parts = path[len(ROOT):].strip('/').split('/')
        if path in (ROOT, ROOT + '/'):
            return self._service_root()
        if path == '/redfish':
            return {'v1': ROOT + '/'}
        head = parts[0]
        if self.cxl is not None and head in ('Fabrics', 'Systems',
                                             'Chassis'):
            return self._render_cxl(head, parts[1:])
        if self.fabric is not None:
            if head == 'Fabrics':
                return self._render_fabrics(parts[1:])
            if head == 'CompositionService':
                return None
            if head == 'Systems' and len(parts) > 2:
                return self._render_processors(parts[1], parts[2:])
            if path.startswith(POOL + '/MemoryDomains/'):
                return self._render_memory_chunk(parts[3:])
        if head == 'SessionService':
            return self._render_sessions(parts[1:])
        if head == 'CompositionService':
            return self._render_composition(parts[1:])
        if head == 'Systems':
            return self._render_systems(parts[1:])
        if head == 'Chassis':
            return self._render_chassis(parts[1:])
        return None

    def _resource(self, kind, uri, rid, name, **body):
        res = {'@odata.type': '#%s.%s' % (TYPES[kind], kind),
               '@odata.id': uri, 'Id': rid, 'Name': name}
        res.update(body)
        return res

    def _collection(self, kind, uri, name, members):
        return {'@odata.type': '#%s.%s' % (kind, kind), '@odata.id': uri,
                'Name': name, 'Members@odata.count': len(members),
                'Members': [_link(m) for m in members]}

    def _service_root(self):
        root = self._root_without_features()
        if self.fabric is not None or self.cxl is not None:
            # A fabric manager: endpoints are zoned, nothing composed.
            root.pop('CompositionService')
            root['Fabrics'] = _link(FABRICS)
        if self.expand:
            root['ProtocolFeaturesSupported'] = {'ExpandQuery': {
                'ExpandAll': False, 'Levels': True, 'Links': False,
                'MaxLevels': 1, 'NoLinks': True}}
        return root

    def _root_without_features(self):
        if not self.session_service:
            return self._resource(
                'ServiceRoot', ROOT + '/', 'RootService', 'Root Service',
                RedfishVersion='1.15.0',
                UUID='92384634-2938-2342-8820-489239905423',
                Systems=_link(SYSTEMS), Chassis=_link(CHASSIS),
                CompositionService=_link(ROOT + '/CompositionService'),
                Links={})
        return self._resource(
            'ServiceRoot', ROOT + '/', 'RootService', 'Root Service',
            RedfishVersion='1.15.0',
            UUID='92384634-2938-2342-8820-489239905423',
            Systems=_link(SYSTEMS), Chassis=_link(CHASSIS),
            SessionService=_link(ROOT + '/SessionService'),
            CompositionService=_link(ROOT + '/CompositionService'),
            Links={'Sessions': _link(SESSIONS)})

    def _render_sessions(self, parts):
        if not self.session_service:
            return None
        if not parts:
            return self._resource(
                'SessionService', ROOT + '/SessionService',
                'SessionService', 'Session Service',
                Status={'State': 'Enabled', 'Health': 'OK'},
                ServiceEnabled=True, SessionTimeout=self.session_timeout,
                Sessions=_link(SESSIONS))
        if parts == ['Sessions']:
            return self._collection(
                'SessionCollection', SESSIONS, 'Session Collection',
                [SESSIONS + '/' + s['id'] for s in self.sessions.values()])
        if len(parts) == 2 and parts[0] == 'Sessions':
            for session in self.sessions.values():
                if session['id'] == parts[1]:
                    return self._resource(
                        'Session', SESSIONS + '/' + parts[1], parts[1],
                        'User Session', UserName=self.username,
                        Password=None)
        return None

    def _render_composition(self, parts):
        if not parts:
            return self._resource(
                'CompositionService', ROOT + '/CompositionService',
                'CompositionService', 'Composition Service',
                Status={'State': 'Enabled', 'Health': 'OK'},
                ServiceEnabled=True, AllowOverprovisioning=False,
                AllowZoneAffinity=True,
                ResourceBlocks=_link(BLOCKS), ResourceZones=_link(ZONES))
        if parts == ['ResourceBlocks']:
            return self._collection(
                'ResourceBlockCollection', BLOCKS,
                'Resource Block Collection',
                [BLOCKS + '/' + b for b in sorted(self.blocks)])
        if parts == ['ResourceZones']:
            return self._collection(
                'ZoneCollection', ZONES, 'Resource Zone Collection',
                [ZONES + '/' + z for z in sorted(self.zones)])
        if parts[0] == 'ResourceZones' and len(parts) == 2:
            return self._zone(parts[1])
        if parts[0] == 'ResourceBlocks' and parts[1] in self.blocks:
            if len(parts) == 2:
                return self._block(parts[1])
            if len(parts) == 4 and parts[3] == '0':
                return self._block_member(parts[1], parts[2])
            if (parts[2:] == ['Storage', '0', 'Drives', '0']
                    and self.blocks[parts[1]].get('shape') == 'storage'):
                return self._drive(parts[1], '/'.join(
                    [BLOCKS] + parts[1:]), links={})
        return None

    def _pcie(self, bid):
        """True when the block's device is in the chassis' PCIe
        devices (the service knows its PCIe ids)."""
        block = self.blocks[bid]
        return block['kind'] in KINDS and not block.get('no_ids')

    def _zone(self, zid):
        zone = self.zones.get(zid)
        if zone is None:
            return None
        members = [BLOCKS + '/' + b for b in sorted(self.blocks)
                   if zid in self.blocks[b]['zones']]
        return self._resource(
            'Zone', ZONES + '/' + zid, zid, zone['name'],
            Status={'State': 'Enabled', 'Health': 'OK'},
            ZoneType='ZoneOfResourceBlocks',
            Links={'ResourceBlocks': [_link(m) for m in members]})

    def _block(self, bid):
        block = self.blocks[bid]
        uri = BLOCKS + '/' + bid
        links = {'Zones': [_link(ZONES + '/' + z) for z in block['zones']],
                 'ComputerSystems': [],
                 'Chassis': [_link(POOL)]}
        if block['system'] is not None:
            links['ComputerSystems'] = [
                _link(SYSTEMS + '/' + block['system'])]
        links['ComputerSystems'] += [_link(SYSTEMS + '/' + sid)
                                     for sid in block.get('sharers', [])]
        state = block['state']
        status = {'State': block.get('status_state', 'Enabled'),
                  'Health': block['health']}
        if state == 'Failed' and block.get('message'):
            status['Conditions'] = [{
                'MessageId': 'Base.1.18.GeneralError',
                'Message': block['message'], 'Severity': 'Critical'}]
        body = {
            'Status': status,
            'CompositionStatus': {
                'Reserved': bool(block.get('reserved')),
                'CompositionState': state,
                'SharingCapable': bool(block.get('sharers')),
                'MaxCompositions': max(1, len(block.get('sharers', []))),
                'NumberOfCompositions': len(links['ComputerSystems'])},
            'Links': links}
        if block['kind'] == 'compute':
            body['ResourceBlockType'] = ['ComputerSystem']
            body['ComputerSystems'] = [_link(SYSTEMS + '/' +
                                             block['system'])]
            name = 'System block of %s' % block['system']
        elif block.get('shape') == 'storage':
            # A storage appliance's block: Storage -> Drives.
            body['ResourceBlockType'] = ['Storage']
            body['Storage'] = [_link('%s/Storage/0' % uri)]
            name = 'Storage block %s' % bid
        else:
            rtype, prop = (KINDS.get(block['kind']) or
                           UNBINDABLE[block['kind']])[:2]
            body['ResourceBlockType'] = [rtype]
            body[prop] = [_link('%s/%s/0' % (uri, prop))]
            name = '%s block %s' % (block['kind'].upper(), bid)
        return self._resource('ResourceBlock', uri, bid, name, **body)

    def _drive(self, bid, uri, links):
        block = self.blocks[bid]
        sas = block['kind'] == 'sas'
        return self._resource(
            'Drive', uri, '0', '%s drive %s' % ('SAS' if sas else 'NVMe',
                                                bid),
            Status={'State': 'Enabled', 'Health': block['health']},
            Protocol='SAS' if sas else 'NVMe',
            MediaType='HDD' if sas else 'SSD',
            Links=links, **self._identity(bid))

    def _block_member(self, bid, prop):
        block = self.blocks[bid]
        uri = '%s/%s/%s/0' % (BLOCKS, bid, prop)
        device = POOL + '/PCIeDevices/' + bid
        function = device + '/PCIeFunctions/0'
        status = {'State': 'Enabled', 'Health': block['health']}
        if block.get('shape') == 'storage':
            if prop != 'Storage':
                return None
            return self._resource(
                'Storage', uri, '0', 'NVMe storage of %s' % bid,
                Status=status, Drives=[_link(uri + '/Drives/0')],
                StorageControllers=[{
                    '@odata.id': uri + '#/StorageControllers/0',
                    'MemberId': '0', 'Status': status,
                    'SupportedControllerProtocols': ['PCIe'],
                    'SupportedDeviceProtocols': ['NVMe'],
                    'Links': {'PCIeFunctions': [_link(function)]}}])
        if block['kind'] in UNBINDABLE:
            kind = UNBINDABLE[block['kind']][2]
            if UNBINDABLE[block['kind']][1] != prop:
                return None
            if kind == 'Drive':
                return self._drive(bid, uri, links={})
            if kind == 'Memory':
                return self._resource(
                    'Memory', uri, '0', 'DIMM of %s' % bid, Status=status,
                    MemoryDeviceType='DDR5', CapacityMiB=65536)
            return self._resource(
                kind, uri, '0', 'Network settings of %s' % bid,
                Status=status)
        if KINDS[block['kind']][1] != prop:
            return None
        kind = KINDS[block['kind']][2]
        if block.get('no_ids'):
            pcie = {}
        elif kind == 'Processor':
            pcie = {'PCIeDevice': _link(device),
                    'PCIeFunctions': [_link(function)]}
        else:
            pcie = {'PCIeFunctions': [_link(function)]}
        if kind == 'Processor':
            return self._resource(
                kind, uri, '0', '%s %s' % (block['kind'].upper(), bid),
                Status=status,
                ProcessorType='GPU' if block['kind'] == 'gpu' else 'FPGA',
                Links=pcie, **self._identity(bid))
        if kind == 'Drive':
            return self._drive(bid, uri, links=pcie)
        return self._resource(
            kind, uri, '0', 'Network interface of %s' % bid,
            Status=status,
            Links={} if block.get('no_ids') else {
                'NetworkAdapter': _link(POOL + '/NetworkAdapters/' + bid)})

    def _render_systems(self, parts):
        if not parts:
            collection = self._collection(
                'ComputerSystemCollection', SYSTEMS,
                'Computer System Collection',
                [SYSTEMS + '/' + s for s in sorted(self.systems)])
            if self.composition == 'constrained':
                collection['@Redfish.CollectionCapabilities'] = {
                    '@odata.type': '#CollectionCapabilities.v1_4_1.'
                                   'CollectionCapabilities',
                    'Capabilities': [{
                        'CapabilitiesObject': _link(CAPABILITIES),
                        'UseCase': 'ComputerSystemConstrainedComposition',
                        'Links': {'TargetCollection': _link(SYSTEMS)}}]}
            if self.composition == 'specific':
                collection['@Redfish.CollectionCapabilities'] = {
                    '@odata.type': '#CollectionCapabilities.v1_4_1.'
                                   'CollectionCapabilities',
                    'Capabilities': [{
                        'CapabilitiesObject': _link(CAPABILITIES),
                        'UseCase': 'ComputerSystemComposition',
                        'Links': {
                            'TargetCollection': _link(SYSTEMS),
                            'RelatedItem': [_link(ZONES + '/' + z)
                                            for z in sorted(self.zones)]}}]}
            return collection
        if parts == ['Capabilities'] and self.composition != 'expandable':
            return self._capabilities()
        if len(parts) != 1 or parts[0] not in self.systems:
            return None
        sid = parts[0]
        system = self.systems[sid]
        uri = SYSTEMS + '/' + sid
        if self.fabric is not None:
            return self._resource(
                'ComputerSystem', uri, sid, system['name'],
                SystemType='Physical', UUID=system['uuid'],
                HostName=system['host_name'], PowerState='On',
                Status={'State': 'Enabled', 'Health': 'OK'},
                Processors=_link(uri + '/Processors'), Links={},
                Actions={'#ComputerSystem.Reset': {
                    'target': uri + '/Actions/ComputerSystem.Reset',
                    'ResetType@Redfish.AllowableValues': ['On',
                                                          'ForceOff']}})
        return self._resource(
            'ComputerSystem', uri, sid, system['name'],
            SystemType=('Physical' if self.composition == 'expandable'
                        else 'Composed'), UUID=system['uuid'],
            HostName=system['host_name'], PowerState='On',
            Status={'State': 'Enabled', 'Health': 'OK'},
            Links={'ResourceBlocks': [_link(BLOCKS + '/' + b)
                                      for b in system['blocks']]},
            Actions={
                '#' + ADD: {'target': uri + '/Actions/' + ADD},
                '#' + REMOVE: {'target': uri + '/Actions/' + REMOVE}}
            if system['expandable'] else {
                '#ComputerSystem.Reset': {
                    'target': uri + '/Actions/ComputerSystem.Reset',
                    'ResetType@Redfish.AllowableValues': ['On',
                                                          'ForceOff']}})

    def _capabilities(self):
        """What a POST to the Systems collection takes (DSP2050): a name
        and the blocks, at most one of them a compute block."""
        return self._resource(
            'ComputerSystem', CAPABILITIES, 'Capabilities',
            'Capabilities of the system collection',
            **{'Name@Redfish.RequiredOnCreate': True,
               'Name@Redfish.SetOnlyOnCreate': True,
               'HostName@Redfish.OptionalOnCreate': True,
               'Links@Redfish.RequiredOnCreate': True,
               'Links': {
                   'ResourceBlocks@Redfish.RequiredOnCreate': True,
                   'ResourceBlocks@Redfish.UpdatableAfterCreate':
                       self.updatable},
               '@Redfish.ResourceBlockLimits': {'MinCompute': 1,
                                                'MaxCompute': 1}})

    def _identity(self, bid):
        """Manufacturer, Model and SerialNumber of a block's device as
        its resources give them; with ``assembly`` they give none but link
        the device's Assembly, which has them."""
        block = self.blocks[bid]
        if block.get('assembly'):
            return {'Assembly': _link('%s/PCIeDevices/%s/Assembly' %
                                      (POOL, bid))}
        return {'Manufacturer': block.get('manufacturer'),
                'Model': block.get('model'),
                'SerialNumber': block.get('serial')}

    def _assembly(self, bid, uri):
        """The Assembly of a device: the board itself and its heat
        sink, as a service's field-replaceable-unit data lists them."""
        block = self.blocks[bid]
        return self._resource(
            'Assembly', uri, 'Assembly', 'Assembly of %s' % bid,
            Assemblies=[
                {'@odata.id': uri + '#/Assemblies/0', 'MemberId': '0',
                 'Name': 'Board of %s' % bid,
                 'Model': block.get('model'),
                 'PartNumber': block.get('part_number'),
                 'SerialNumber': block.get('serial'),
                 'Vendor': block.get('manufacturer'),
                 'Producer': block.get('manufacturer'), 'Version': 'A01'},
                {'@odata.id': uri + '#/Assemblies/1', 'MemberId': '1',
                 'Name': 'Heat sink of %s' % bid, 'Model': 'Passive',
                 'SerialNumber': 'HS-%s' % bid}],
            **{'Assemblies@odata.count': 2})

    def _render_chassis(self, parts):
        devices = sorted(b for b in self.blocks if self._pcie(b))
        if not parts:
            return self._collection('ChassisCollection', CHASSIS,
                                    'Chassis Collection', [POOL])
        if parts[0] != 'Pool':
            return None
        if len(parts) == 1:
            return self._resource(
                'Chassis', POOL, 'Pool', 'Composable PCIe pool',
                ChassisType='Enclosure',
                Status={'State': 'Enabled', 'Health': 'OK'},
                PCIeDevices=_link(POOL + '/PCIeDevices'),
                NetworkAdapters=_link(POOL + '/NetworkAdapters'))
        nics = [d for d in devices if self.blocks[d]['kind'] == 'nic']
        if parts[1:] == ['NetworkAdapters']:
            return self._collection(
                'NetworkAdapterCollection', POOL + '/NetworkAdapters',
                'Network Adapter Collection',
                [POOL + '/NetworkAdapters/' + d for d in nics])
        if parts[1] == 'NetworkAdapters' and parts[2:] and parts[2] in nics:
            block = self.blocks[parts[2]]
            return self._resource(
                'NetworkAdapter', POOL + '/NetworkAdapters/' + parts[2],
                parts[2], 'Network adapter %s' % parts[2],
                Status={'State': 'Enabled', 'Health': block['health']},
                Controllers=[{'Links': {'PCIeDevices': [
                    _link(POOL + '/PCIeDevices/' + parts[2])]}}],
                **self._identity(parts[2]))
        if parts[1:] == ['PCIeDevices']:
            return self._collection(
                'PCIeDeviceCollection', POOL + '/PCIeDevices',
                'PCIe Device Collection',
                [POOL + '/PCIeDevices/' + d for d in devices])
        if parts[1] != 'PCIeDevices' or parts[2] not in devices:
            return None
        bid = parts[2]
        block = self.blocks[bid]
        device = POOL + '/PCIeDevices/' + bid
        status = {'State': 'Enabled', 'Health': block['health']}
        if len(parts) == 3:
            return self._resource(
                'PCIeDevice', device, bid, 'PCIe device %s' % bid,
                Status=status, DeviceType='SingleFunction',
                PCIeFunctions=_link(device + '/PCIeFunctions'),
                **self._identity(bid))
        if parts[3:] == ['Assembly'] and block.get('assembly'):
            return self._assembly(bid, device + '/Assembly')
        if parts[3:] == ['PCIeFunctions']:
            return self._collection(
                'PCIeFunctionCollection', device + '/PCIeFunctions',
                'PCIe Function Collection', [device + '/PCIeFunctions/0'])
        if parts[3:] == ['PCIeFunctions', '0']:
            return self._resource(
                'PCIeFunction', device + '/PCIeFunctions/0', '0',
                'Function 0 of %s' % bid, Status=status, FunctionId=0,
                FunctionType='Physical',
                DeviceClass=KINDS[block['kind']][3],
                VendorId=_pcie_id(block.get('vendor_id')),
                DeviceId=_pcie_id(block.get('device_id')),
                SubsystemVendorId=_pcie_id(block.get('vendor_id')),
                SubsystemId=_pcie_id(block.get('subsystem_id', '0000')),
                Links={'PCIeDevice': _link(device)})
        return None

    def etag(self, path, body):
        text = json.dumps(body, sort_keys=True) + str(
            self._revisions.get(path.rstrip('/'), 0))
        return '"%s"' % hashlib.sha256(text.encode()).hexdigest()[:16]

    def metadata(self):
        lines = ['<?xml version="1.0" encoding="UTF-8"?>',
                 '<edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/'
                 'ns/edmx" Version="4.0">']
        for name in sorted(list(TYPES) + list(COLLECTIONS)):
            lines.append('  <edmx:Reference Uri="%s%s_v1.xml">' %
                         (SCHEMA_BASE, name))
            lines.append('    <edmx:Include Namespace="%s"/>' % name)
            if name in TYPES:
                lines.append('    <edmx:Include Namespace="%s"/>' %
                             TYPES[name])
            lines.append('  </edmx:Reference>')
        lines += ['  <edmx:DataServices>',
                  '    <Schema xmlns="http://docs.oasis-open.org/odata/ns/'
                  'edm" Namespace="Service">',
                  '      <EntityContainer Name="Service" '
                  'Extends="ServiceRoot.v1_20_0.ServiceContainer"/>',
                  '    </Schema>', '  </edmx:DataServices>',
                  '</edmx:Edmx>', '']
        return '\n'.join(lines)

    def odata(self):
        services = [('Service', ROOT + '/'), ('Systems', SYSTEMS),
                    ('Chassis', CHASSIS),
                    ('SessionService', ROOT + '/SessionService')]
        services.append(('CompositionService', ROOT + '/CompositionService')
                        if self.fabric is None else ('Fabrics', FABRICS))
        return {'@odata.context': ROOT + '/$metadata',
                'value': [{'name': n, 'kind': 'Singleton', 'url': u}
                          for n, u in services]}

    # -------------------------------------------------------- actions

    def _error(self, status, message_id, message):
        return status, {}, {'error': {
            'code': 'Base.1.18.' + message_id, 'message': message,
            '@Message.ExtendedInfo': [{
                '@odata.type': '#Message.v1_2_0.Message',
                'MessageId': 'Base.1.18.' + message_id,
                'Message': message, 'Severity': 'Warning',
                'Resolution': 'Correct the request and resubmit it.'}]}}

    def _action(self, sid, action, headers, body):
        system_uri = SYSTEMS + '/' + sid
        current = self.etag(system_uri, self._render(system_uri))
        if_match = headers.get('if-match')
        if if_match is not None and if_match not in (current, '*'):
            return self._error(412, 'PreconditionFailed',
                               'The ETag given in If-Match is not current.')
        try:
            target = body['ResourceBlock']['@odata.id']
        except (TypeError, KeyError):
            return self._error(400, 'ActionParameterMissing',
                               'The action requires the ResourceBlock '
                               'parameter.')
        bid = target.rstrip('/').rsplit('/', 1)[-1]
        block = self.blocks.get(bid)
        if (block is None or target.rstrip('/') != BLOCKS + '/' + bid
                or block['kind'] == 'compute'):
            return self._error(400, 'ResourceNotFound',
                               'The resource block %s does not exist or '
                               'cannot be composed.' % target)
        if action == ADD:
            if block['system'] is not None or block['state'] != 'Unused':
                return self._error(400, 'ResourceInUse',
                                   'The resource block %s is %s.' %
                                   (target, block['state']))
            # A service without resource zones composes anything with
            # anything.
            if (self.zones or block['zones']) and not (
                    set(block['zones']) & self._block_zones_of_system(sid)):
                return self._error(
                    400, 'ActionParameterValueConflict',
                    'The resource block %s shares no resource zone with '
                    'the system %s.' % (target, system_uri))
            self._attach(bid, sid)
            block['state'] = 'Composing'
            block['message'] = None
            refused = None
            backend = self.backends.get(sid)
            if backend is not None and block['fault'] is None:
                try:
                    backend.compose(bid, dict(block))
                except Exception as exc:
                    refused = 'The system did not take the device: %s' % exc
            if block['fault'] == 'stuck':
                block['pending'] = None
            elif refused is not None:
                block['fault_message'] = refused
                block['pending'] = (time.monotonic() + self.compose_delay,
                                    'Failed')
            elif block['fault'] == 'fail':
                block['pending'] = (time.monotonic() + self.compose_delay,
                                    'Failed')
            else:
                block['pending'] = (time.monotonic() + self.compose_delay,
                                    'Composed')
        else:
            if block['system'] != sid:
                return self._error(400, 'ResourceNotFound',
                                   'The resource block %s is not part of '
                                   'the system %s.' % (target, system_uri))
            backend = self.backends.get(sid)
            if backend is not None:
                try:
                    backend.decompose(bid, dict(block))
                except Exception as exc:
                    return self._error(
                        500, 'InternalError',
                        'The system %s did not release the resource block '
                        '%s: %s' % (system_uri, target, exc))
            self._detach(bid)
            block['pending'] = (time.monotonic() + self.compose_delay,
                                'Unused')
            block['health'] = block['configured_health']
        if self.task_polls:
            mid = str(next(self._ids))
            self.monitors[mid] = {'left': self.task_polls}
            return 202, {'Location': MONITORS + '/' + mid}, {
                '@odata.type': '#Task.v1_7_4.Task',
                '@odata.id': ROOT + '/TaskService/Tasks/' + mid,
                'Id': mid, 'Name': 'Task ' + mid, 'TaskState': 'Running'}
        return 204, {}, None

    # ------------------------------------------------------------ WSGI

    def _authorized(self, headers):
        basic = headers.get('authorization') or ''
        if basic.lower().startswith('basic '):
            try:
                user, _, password = base64.b64decode(
                    basic[6:].strip()).decode('utf-8').partition(':')
            except ValueError:
                return False
            return (user, password) == (self.username, self.password)
        token = headers.get('x-auth-token')
        session = self.sessions.get(token) if token else None
        if session is None:
            return False
        if session['expires'] < time.monotonic():
            self.sessions.pop(token, None)
            return False
        session['expires'] = time.monotonic() + self.session_timeout
        return True

    def _fault(self, method, path):
        for fault in self.faults:
            if fault['method'] and fault['method'] != method:
                continue
            if fault['path'] and fault['path'] not in path:
                continue
            fault['count'] -= 1
            if fault['count'] <= 0:
                self.faults.remove(fault)
            return fault
        return None

    def handle(self, method, path, headers, raw, query=''):
        """Answer one request: (status, headers, body or None)."""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = ValueError
        record = {'method': method, 'path': path, 'headers': headers,
                  'body': body, 'query': query}
        for callback in list(self._observers):
            callback(record)
        with self.lock:
            self.requests.append(record)
            fault = self._fault(method, path)
        if fault is not None:
            if fault['kind'] == 'drop':
                raise _Drop()
            if fault['kind'] == 'delay':
                time.sleep(fault['seconds'])
            elif fault['kind'] == 'status':
                return self._error(fault['code'], 'InternalError',
                                   'Injected fault.')
            elif fault['kind'] == 'garbage':
                return 200, {}, (fault['body'] if fault['body'] is not None
                                 else '<html>not JSON</html>')
        with self.lock:
            self._advance()
            if fault is not None and fault['kind'] == '412':
                self._bump(path.split('/Actions/')[0].rstrip('/'))
                return self._error(412, 'PreconditionFailed',
                                   'The resource changed meanwhile.')
            if '$expand' in query and not self.expand:
                return self._error(501, 'QueryNotSupported',
                                   'Querying with $expand is not '
                                   'supported.')
            answer = self._answer(method, path, headers, body)
            if (method == 'GET' and answer[0] == 200 and '$expand' in query
                    and isinstance(answer[2], dict)
                    and 'Members' in answer[2]):
                answer = answer[:2] + (dict(answer[2], Members=[
                    self._render(m['@odata.id']) or m
                    for m in answer[2]['Members']]),)
            if (method == 'GET' and answer[0] == 200 and self.page_size
                    and isinstance(answer[2], dict)
                    and 'Members' in answer[2]):
                answer = self._page(path, query, answer)
            # What the client was told, for the tests.
            record['status'] = answer[0]
            record['etag'] = answer[1].get('ETag')
            return answer

    def _answer(self, method, path, headers, body):
        if path == ROOT + '/$metadata':
            return 200, {'Content-Type': 'application/xml'}, \
                self.metadata()
        if path in (ROOT + '/odata', ROOT + '/odata/'):
            return 200, {}, self.odata()
        if body is ValueError:
            return self._error(400, 'MalformedJSON',
                               'The request body is not JSON.')
        public = path in ('/redfish', '/redfish/', ROOT, ROOT + '/')
        if method == 'POST' and path.rstrip('/') == SESSIONS:
            return self._login(body)
        if not public and not self._authorized(headers):
            return 401, {'WWW-Authenticate': 'X-Auth-Token'
                         if self.session_service
                         else 'Basic realm="Redfish"'}, {
                'error': {'code': 'Base.1.18.NoValidSession',
                          'message': 'There is no valid session.'}}
        if method == 'GET':
            res = self._render(path)
            if res is None:
                return self._error(404, 'ResourceMissingAtURI',
                                   'The resource %s was not found.' % path)
            return 200, {'ETag': self.etag(path, res)}, res
        if method == 'DELETE' and path.startswith(SESSIONS + '/'):
            sid = path.rstrip('/').rsplit('/', 1)[-1]
            for token, session in list(self.sessions.items()):
                if session['id'] == sid:
                    del self.sessions[token]
                    return 204, {}, None
            return self._error(404, 'ResourceMissingAtURI',
                               'No session %s.' % sid)
        if self.composition == 'specific':
            answer = self._specific(method, path.rstrip('/'), headers,
                                    body)
            if answer is not None:
                return answer
        if self.cxl is not None:
            answer = self._cxl_change(method, path.rstrip('/'), headers,
                                      body)
            if answer is not None:
                return answer
        if self.fabric is not None:
            answer = self._fabric_change(method, path.rstrip('/'), headers,
                                         body)
            if answer is not None:
                return answer
        if method == 'POST' and path.startswith(SYSTEMS + '/'):
            parts = path[len(SYSTEMS) + 1:].split('/')
            if (len(parts) == 3 and parts[0] in self.systems
                    and self.systems[parts[0]]['expandable']
                    and parts[1] == 'Actions' and parts[2] in (ADD, REMOVE)):
                return self._action(parts[0], parts[2], headers, body)
        return self._error(405, 'OperationNotAllowed',
                           '%s is not allowed on %s.' % (method, path))

    # ------------------------------------------------- fabric zones

    def _fabric_uri(self, *parts):
        return '/'.join((FABRICS, self.fabric['id']) + parts)

    def _fabric_devices(self):
        """Device ids with a target endpoint: the PCIe devices and the
        CXL memory devices."""
        return sorted(b for b in self.blocks if self._pcie(b)) + sorted(
            self.fabric['cxl_memory'])

    def _endpoint_ids(self):
        return (['Switch'] + ['I-' + s for s in sorted(self.systems)] +
                ['T-' + d for d in self._fabric_devices()])

    def _zone_members(self, zid):
        if self.fabric['binding'] == 'connections':
            return self._endpoint_ids() if zid == 'All' else None
        if self.fabric['binding'] == 'create':
            if zid not in self.fabric['created']:
                return None
            sid, device = self.fabric['created'][zid]
            return ['I-' + sid, 'T-' + device]
        if not self._is_host_zone(zid):
            return None
        sid = zid[2:]
        if zid.startswith('Y-'):
            return ['I-' + sid] + [
                'T-' + d for d in self.fabric['given_more'][sid]]
        return ['I-' + sid, 'Switch'] + [
            'T-' + d for d in self.fabric['given'][sid]]

    def _is_host_zone(self, zid):
        """True for a host's zone (Z-<host>, or its second zone
        Y-<host>)."""
        return (zid.startswith('Z-') and zid[2:] in self.fabric['given']
                or zid.startswith('Y-')
                and zid[2:] in self.fabric['given_more'])

    def _zone_ids(self):
        if self.fabric['binding'] == 'connections':
            return ['All']
        if self.fabric['binding'] == 'create':
            return sorted(self.fabric['created'])
        return ['Z-' + s for s in sorted(self.fabric['given'])] + [
            'Y-' + s for s in sorted(self.fabric['given_more'])]

    def _render_fabrics(self, parts):
        fid = self.fabric['id']
        if not parts:
            return self._collection('FabricCollection', FABRICS,
                                    'Fabric Collection',
                                    [self._fabric_uri()])
        if parts[0] != fid:
            return None
        parts = parts[1:]
        if not parts:
            return self._resource(
                'Fabric', self._fabric_uri(), fid, 'CXL fabric',
                FabricType='CXL', Status={'State': 'Enabled',
                                          'Health': 'OK'},
                Endpoints=_link(self._fabric_uri('Endpoints')),
                Zones=_link(self._fabric_uri('Zones')),
                Switches=_link(self._fabric_uri('Switches')),
                **({} if self.fabric['binding'] == 'create' else {
                    'Connections': _link(self._fabric_uri('Connections'))}))
        head, rest = parts[0], parts[1:]
        if head == 'Endpoints':
            if not rest:
                return self._collection(
                    'EndpointCollection', self._fabric_uri('Endpoints'),
                    'Endpoint Collection',
                    [self._fabric_uri('Endpoints', e)
                     for e in self._endpoint_ids()])
            if len(rest) == 1 and rest[0] in self._endpoint_ids():
                return self._endpoint(rest[0])
        if head == 'Zones':
            if not rest:
                return self._collection(
                    'ZoneCollection', self._fabric_uri('Zones'),
                    'Zone Collection',
                    [self._fabric_uri('Zones', z) for z in self._zone_ids()])
            if len(rest) == 1 and rest[0] in self._zone_ids():
                return self._fabric_zone(rest[0])
        if head == 'Connections' and self.fabric['binding'] != 'create':
            links = self.fabric['connections']
            if not rest:
                return self._collection(
                    'ConnectionCollection', self._fabric_uri('Connections'),
                    'Connection Collection',
                    [self._fabric_uri('Connections', c)
                     for c in sorted(links)])
            if len(rest) == 1 and rest[0] in links:
                sid, device = links[rest[0]]
                return self._resource(
                    'Connection', self._fabric_uri('Connections', rest[0]),
                    rest[0], 'Connection %s' % rest[0],
                    Status={'State': 'Enabled', 'Health': 'OK'},
                    Links={'InitiatorEndpoints': [_link(self._fabric_uri(
                        'Endpoints', 'I-' + sid))],
                        'TargetEndpoints': [_link(self._fabric_uri(
                            'Endpoints', 'T-' + device))]})
        if head == 'Switches':
            if not rest:
                return self._collection(
                    'SwitchCollection', self._fabric_uri('Switches'),
                    'Switch Collection', [self._fabric_uri('Switches',
                                                           'CXL')])
            if rest == ['CXL']:
                return self._resource(
                    'Switch', self._fabric_uri('Switches', 'CXL'), 'CXL',
                    'CXL switch', SwitchType='CXL',
                    Status={'State': 'Enabled', 'Health': 'OK'})
        return None

    def _endpoint(self, eid):
        uri = self._fabric_uri('Endpoints', eid)
        health = 'OK'
        if eid == 'Switch':
            entity = {'EntityType': 'Switch', 'EntityRole': 'Target',
                      'EntityLink': _link(self._fabric_uri('Switches',
                                                           'CXL'))}
        elif eid.startswith('I-'):
            entity = {'EntityType': 'Processor', 'EntityRole': 'Initiator',
                      'EntityLink': _link('%s/%s/Processors/CPU0' %
                                          (SYSTEMS, eid[2:]))}
        elif eid[2:] in self.fabric['cxl_memory']:
            entity = {'EntityType': 'MemoryChunk', 'EntityRole': 'Target',
                      'EntityLink': _link('%s/MemoryDomains/%s/'
                                          'MemoryChunks/1' %
                                          (POOL, eid[2:]))}
        else:
            block = self.blocks[eid[2:]]
            health = block['health']
            if block['kind'] == 'nic':
                entity = {'EntityType': 'NetworkController',
                          'EntityRole': 'Target',
                          'EntityLink': _link(POOL + '/NetworkAdapters/' +
                                              eid[2:])}
            else:
                entity = {'EntityType': {'gpu': 'DisplayController',
                                         'nvme': 'StorageInitiator',
                                         'fpga': 'AccelerationFunction'}[
                                             block['kind']],
                          'EntityRole': 'Target',
                          'EntityLink': _link('%s/PCIeDevices/%s/'
                                              'PCIeFunctions/0' %
                                              (POOL, eid[2:]))}
        zones = [self._fabric_uri('Zones', z) for z in self._zone_ids()
                 if eid in self._zone_members(z)]
        links = {'Zones': [_link(z) for z in zones]}
        if eid.startswith(('I-', 'T-')):
            side = 0 if eid.startswith('I-') else 1
            links['Connections'] = [
                _link(self._fabric_uri('Connections', c))
                for c, pair in sorted(self.fabric['connections'].items())
                if pair[side] == eid[2:]]
        return self._resource(
            'Endpoint', uri, eid, 'Endpoint %s' % eid,
            EndpointProtocol='CXL',
            Status={'State': 'Enabled', 'Health': health},
            ConnectedEntities=[entity], Links=links)

    def _fabric_zone(self, zid):
        links = {'Endpoints': [_link(self._fabric_uri('Endpoints', e))
                               for e in self._zone_members(zid)]}
        reach = self.fabric['reach']
        if zid.startswith('Y-') and self._is_host_zone(zid):
            reach = self.fabric['more_zones']
        if reach is not None and zid[2:] in reach:
            links['Endpoints@Redfish.AllowableValues'] = [
                _link(self._fabric_uri('Endpoints', 'T-' + d))
                for d in reach[zid[2:]]]
        more = {}
        if self.fabric.get('zone_actions') and zid != 'All':
            uri = self._fabric_uri('Zones', zid)
            more['Actions'] = {
                '#Zone.AddEndpoint': {
                    'target': uri + '/Actions/Zone.AddEndpoint'},
                '#Zone.RemoveEndpoint': {
                    'target': uri + '/Actions/Zone.RemoveEndpoint'}}
        return self._resource(
            'Zone', self._fabric_uri('Zones', zid), zid,
            'Zone of every endpoint' if zid == 'All'
            else 'Zone %s of host %s' % (zid, self.fabric['created'][zid][0])
            if zid in self.fabric['created']
            else 'Second zone of host %s' % zid[2:] if zid.startswith('Y-')
            else 'Zone of host %s' % zid[2:],
            ZoneType='ZoneOfEndpoints',
            Status={'State': 'Enabled', 'Health': 'OK'}, Links=links,
            **more)

    def _render_processors(self, sid, parts):
        if sid not in self.systems:
            return None
        uri = '%s/%s/Processors' % (SYSTEMS, sid)
        if parts == ['Processors']:
            return self._collection('ProcessorCollection', uri,
                                    'Processor Collection', [uri + '/CPU0'])
        if parts == ['Processors', 'CPU0']:
            return self._resource(
                'Processor', uri + '/CPU0', 'CPU0', 'CPU 0',
                ProcessorType='CPU',
                Status={'State': 'Enabled', 'Health': 'OK'})
        return None

    def _render_memory_chunk(self, parts):
        if (len(parts) != 3 or parts[0] not in self.fabric['cxl_memory']
                or parts[1:] != ['MemoryChunks', '1']):
            return None
        return self._resource(
            'MemoryChunks', '%s/MemoryDomains/%s/MemoryChunks/1' %
            (POOL, parts[0]), '1', 'CXL memory of %s' % parts[0],
            MemoryChunkSizeMiB=65536, AddressRangeType='Volatile',
            Status={'State': 'Enabled', 'Health': 'OK'})

    def _endpoint_id(self, link):
        """The endpoint id of a link to one of the fabric's endpoints."""
        try:
            uri = link['@odata.id'].rstrip('/')
        except (TypeError, KeyError, AttributeError):
            return None
        eid = uri.rsplit('/', 1)[-1]
        if uri != self._fabric_uri('Endpoints', eid) or (
                eid not in self._endpoint_ids()):
            return None
        return eid

    def _holder(self, device):
        for sid, given in (list(self.fabric['given'].items()) +
                           list(self.fabric['given_more'].items())):
            if device in given:
                return sid
        for sid, target in (list(self.fabric['connections'].values()) +
                            list(self.fabric['created'].values())):
            if target == device:
                return sid
        return None

    def _create_zone(self, body):
        """POST to the Zones collection: a zone of one host's initiator
        and one device's target endpoint."""
        try:
            ids = [self._endpoint_id(link)
                   for link in body['Links']['Endpoints']]
        except (TypeError, KeyError):
            return self._error(400, 'PropertyMissing',
                               'The request needs Links.Endpoints.')
        initiators = [e for e in ids if (e or '').startswith('I-')]
        targets = [e for e in ids if (e or '').startswith('T-')]
        if None in ids or len(initiators) != 1 or len(targets) != 1:
            return self._error(400, 'PropertyValueConflict',
                               'A zone takes one initiator and one target '
                               'endpoint of the fabric.')
        sid, device = initiators[0][2:], targets[0][2:]
        holder = self._holder(device)
        if holder is not None:
            return self._error(400, 'ResourceInUse',
                               'The endpoint of %s is given to %s.' %
                               (device, holder))
        zid = 'Z%d' % next(self._ids)
        self.fabric['created'][zid] = (sid, device)
        uri = self._fabric_uri('Zones', zid)
        return self._accepted(201, {'Location': uri}, self._render(uri))

    def _zone_to(self, zid, ids):
        """Make ``ids`` (endpoint ids) the endpoints of a host's zone."""
        sid = zid[2:]
        if None in ids:
            return self._error(400, 'ResourceNotFound',
                               'An endpoint given is not one of the '
                               'fabric\'s.')
        if 'I-' + sid not in ids:
            return self._error(400, 'PropertyValueConflict',
                               'The zone of host %s keeps its initiator.' %
                               sid)
        devices = [e[2:] for e in ids if e.startswith('T-')]
        reach, store = self.fabric['reach'], self.fabric['given']
        if zid.startswith('Y-'):
            reach, store = self.fabric['more_zones'], self.fabric[
                'given_more']
        for device in devices:
            holder = self._holder(device)
            if holder not in (None, sid):
                return self._error(400, 'ResourceInUse',
                                   'The endpoint of %s is given to %s.' %
                                   (device, holder))
            if (reach is not None and device not in reach.get(sid, [])
                    and device not in store[sid]):
                return self._error(400, 'PropertyValueNotInList',
                                   'The endpoint of %s cannot join zone '
                                   '%s.' % (device, zid))
        store[sid] = sorted(set(devices))
        self._bump(self._fabric_uri('Zones', zid))
        return self._accepted(204, {}, None)

    def _zone_action(self, rest, headers, body):
        """Zone.AddEndpoint and Zone.RemoveEndpoint (Zone v1_5_0): the
        zone's ETag in If-Match or ZoneETag, the endpoint's in
        EndpointETag, each checked when given."""
        zid, _, action = rest.partition('/Actions/')
        if not self._is_host_zone(zid) or action not in (
                'Zone.AddEndpoint', 'Zone.RemoveEndpoint'):
            return None
        zone_uri = self._fabric_uri('Zones', zid)
        current = self.etag(zone_uri, self._render(zone_uri))
        body = body if isinstance(body, dict) else {}
        for given in (headers.get('if-match'), body.get('ZoneETag')):
            if given is not None and given not in (current, '*'):
                return self._error(412, 'PreconditionFailed',
                                   'The zone\'s ETag is not current.')
        eid = self._endpoint_id(body.get('Endpoint'))
        if eid is None:
            return self._error(400, 'ActionParameterMissing',
                               'The action needs the Endpoint parameter, '
                               'an endpoint of the fabric.')
        endpoint_uri = self._fabric_uri('Endpoints', eid)
        given = body.get('EndpointETag')
        if given is not None and given != self.etag(
                endpoint_uri, self._render(endpoint_uri)):
            return self._error(412, 'PreconditionFailed',
                               'The endpoint\'s ETag is not current.')
        ids = self._zone_members(zid)
        if action == 'Zone.AddEndpoint':
            ids = ids + [eid]
        elif eid in ids:
            ids.remove(eid)
        return self._zone_to(zid, ids)

    def _fabric_change(self, method, path, headers, body):
        """PATCH of a host zone's Links.Endpoints, POST and DELETE of
        Connections; None for any other request."""
        zones = self._fabric_uri('Zones') + '/'
        connections = self._fabric_uri('Connections')
        if method in ('PATCH', 'DELETE') and path.startswith(
                (zones, connections + '/')):
            if self._render(path) is None:
                return self._error(404, 'ResourceMissingAtURI',
                                   'The resource %s was not found.' % path)
            if_match = headers.get('if-match')
            if if_match is not None and if_match not in (
                    self.etag(path, self._render(path)), '*'):
                return self._error(412, 'PreconditionFailed',
                                   'The ETag given in If-Match is not '
                                   'current.')
        if method == 'PATCH' and path.startswith(zones):
            zid = path[len(zones):]
            if self.fabric['binding'] != 'zones' or self.fabric.get(
                    'zone_actions') or not self._is_host_zone(zid):
                # Links.Endpoints is read-only in DSP0268's Zone schema;
                # a service that offers the actions keeps it so.
                return self._error(405, 'PropertyNotWritable',
                                   'The endpoints of %s cannot be changed '
                                   'by PATCH.' % path)
            try:
                ids = [self._endpoint_id(link)
                       for link in body['Links']['Endpoints']]
            except (TypeError, KeyError):
                return self._error(400, 'PropertyMissing',
                                   'The request needs Links.Endpoints.')
            return self._zone_to(zid, ids)
        if (method == 'POST' and path == zones.rstrip('/')
                and self.fabric['binding'] == 'create'):
            return self._create_zone(body)
        if (method == 'DELETE' and path.startswith(zones)
                and path[len(zones):] in self.fabric['created']):
            del self.fabric['created'][path[len(zones):]]
            return self._accepted(204, {}, None)
        if (method == 'POST' and path.startswith(zones)
                and self.fabric.get('zone_actions')):
            return self._zone_action(path[len(zones):], headers, body)
        if method == 'POST' and path == connections:
            try:
                initiators = [self._endpoint_id(link) for link in
                              body['Links']['InitiatorEndpoints']]
                targets = [self._endpoint_id(link) for link in
                           body['Links']['TargetEndpoints']]
            except (TypeError, KeyError):
                return self._error(400, 'PropertyMissing',
                                   'The request needs Links.'
                                   'InitiatorEndpoints and TargetEndpoints.')
            if (len(initiators) != 1 or len(targets) != 1
                    or not (initiators[0] or '').startswith('I-')
                    or not (targets[0] or '').startswith('T-')):
                return self._error(400, 'PropertyValueConflict',
                                   'A connection takes one initiator and '
                                   'one target endpoint of the fabric.')
            sid, device = initiators[0][2:], targets[0][2:]
            holder = self._holder(device)
            if holder is not None:
                return self._error(400, 'ResourceInUse',
                                   'The endpoint of %s is given to %s.' %
                                   (device, holder))
            cid = str(next(self._ids))
            self.fabric['connections'][cid] = (sid, device)
            uri = self._fabric_uri('Connections', cid)
            return self._accepted(201, {'Location': uri}, self._render(uri))
        if method == 'DELETE' and path.startswith(connections + '/'):
            del self.fabric['connections'][path.rsplit('/', 1)[-1]]
            return self._accepted(204, {}, None)
        return None

    # ----------------------------------------------- CXL memory

    def _cxl_setup(self, config):
        cxl = self.cxl
        cxl.setdefault('fabric_id', 'CXL')
        cxl.setdefault('min_mb', 256)
        cxl.setdefault('increment_mb', 256)
        cxl.setdefault('creation', True)
        cxl.setdefault('zones', {})
        # kind ('chunk', 'connection', 'delete') -> message of a refusal.
        cxl['refusals'] = {}
        cxl['systems'] = {str(s['id']): s
                          for s in config.get('systems', [])}
        devices = {}
        # connection id -> {'name', 'system', 'device', 'chunk'}
        connections = {}
        for device in cxl.get('devices', []):
            did = str(device['id'])
            chunks = {}
            for chunk in device.get('chunks', []):
                chunks[str(chunk['id'])] = {
                    'size_mb': int(chunk['size_mb']),
                    'name': chunk.get('name') or 'Memory Chunk %s' %
                    chunk['id']}
                if chunk.get('connection'):
                    cid, sid = chunk['connection']
                    connections[str(cid)] = {
                        'name': 'Connection %s' % cid, 'system': sid,
                        'device': did, 'chunk': str(chunk['id'])}
            devices[did] = {'size_mb': int(device['size_mb']),
                            'gcxlid': device.get('gcxlid'),
                            'chunks': chunks}
        cxl['devices'] = devices
        cxl['connections'] = connections
        cxl['next'] = itertools.count(100)

    def refuse_cxl(self, kind, message=None):
        """Refuse every ``kind`` request (``chunk``: making a chunk,
        ``connection``: making a connection, ``delete``: deleting either)
        with ``message``; None: refuse no more."""
        if kind not in ('chunk', 'connection', 'delete'):
            raise ValueError('unknown refusal %s' % kind)
        with self.lock:
            if message is None:
                self.cxl['refusals'].pop(kind, None)
            else:
                self.cxl['refusals'][kind] = message

    def cxl_state(self):
        """{device: {chunk id: size}} and {connection id: (system,
        device, chunk)}, for tests to check what is left."""
        with self.lock:
            return ({d: {c: v['size_mb'] for c, v in dev['chunks'].items()}
                     for d, dev in self.cxl['devices'].items()},
                    {c: (v['system'], v['device'], v['chunk'])
                     for c, v in self.cxl['connections'].items()})

    def _cxl_fabric(self, *parts):
        return '/'.join((FABRICS, self.cxl['fabric_id']) + parts)

    def _cxl_domain(self, did, *parts):
        return '/'.join((CHASSIS, did, 'MemoryDomains', '1') + parts)

    def _cxl_ld(self, did):
        return '%s/%s/PCIeDevices/1/CXLLogicalDevices/1' % (CHASSIS, did)

    def _cxl_zones_of(self, member):
        return sorted(z for z, members in self.cxl['zones'].items()
                      if member in members)

    def _cxl_free(self, did):
        device = self.cxl['devices'][did]
        return device['size_mb'] - sum(c['size_mb'] for c in
                                       device['chunks'].values())

    def _render_cxl(self, head, parts):
        cxl = self.cxl
        systems = cxl['systems']
        devices = cxl['devices']
        if head == 'Systems':
            if not parts:
                return self._collection(
                    'ComputerSystemCollection', SYSTEMS,
                    'Computer System Collection',
                    [SYSTEMS + '/' + s for s in sorted(systems)])
            sid = parts[0]
            if sid not in systems:
                return None
            system = systems[sid]
            uri = SYSTEMS + '/' + sid
            if len(parts) == 1:
                return self._resource(
                    'ComputerSystem', uri, sid, system.get('name') or sid,
                    SystemType='Physical', UUID=system.get('uuid'),
                    HostName=system.get('host_name', system.get('name')),
                    PowerState='On',
                    Status={'State': 'Enabled', 'Health': 'OK'},
                    Processors=_link(uri + '/Processors'), Links={})
            if parts[1:] == ['Processors']:
                return self._collection('ProcessorCollection',
                                        uri + '/Processors',
                                        'Processor Collection',
                                        [uri + '/Processors/CPU'])
            cpu = uri + '/Processors/CPU'
            if parts[1:] == ['Processors', 'CPU']:
                return self._resource(
                    'Processor', cpu, 'CPU', 'Host processor',
                    ProcessorType='CPU', Ports=_link(cpu + '/Ports'),
                    Status={'State': 'Enabled', 'Health': 'OK'})
            if parts[1:] == ['Processors', 'CPU', 'Ports']:
                return self._collection('PortCollection', cpu + '/Ports',
                                        'Port Collection',
                                        [cpu + '/Ports/1'])
            if parts[1:] == ['Processors', 'CPU', 'Ports', '1']:
                return self._cxl_port(cpu + '/Ports/1', '1',
                                      'Host CXL port')
            return None
        if head == 'Chassis':
            if not parts:
                return self._collection('ChassisCollection', CHASSIS,
                                        'Chassis Collection',
                                        [CHASSIS + '/' + d
                                         for d in sorted(devices)])
            did = parts[0]
            if did not in devices:
                return None
            return self._render_cxl_chassis(did, parts[1:])
        # Fabrics
        fabric = self._cxl_fabric()
        fid = cxl['fabric_id']
        if not parts:
            return self._collection('FabricCollection', FABRICS,
                                    'Fabric Collection', [fabric])
        if parts[0] != fid:
            return None
        rest = parts[1:]
        if not rest:
            return self._resource(
                'Fabric', fabric, fid, 'CXL Fabric', FabricType='CXL',
                Status={'State': 'Enabled', 'Health': 'OK'},
                Switches=_link(fabric + '/Switches'),
                Endpoints=_link(fabric + '/Endpoints'),
                Zones=_link(fabric + '/Zones'),
                Connections=_link(fabric + '/Connections'))
        if rest == ['Switches']:
            return self._collection('SwitchCollection', fabric + '/Switches',
                                    'Switch Collection',
                                    [fabric + '/Switches/CXL'])
        switch = fabric + '/Switches/CXL'
        if rest == ['Switches', 'CXL']:
            return self._resource(
                'Switch', switch, 'CXL', 'CXL Switch', SwitchType='CXL',
                Ports=_link(switch + '/Ports'),
                Status={'State': 'Enabled', 'Health': 'OK'})
        ports = (['U-' + s for s in sorted(systems)] +
                 ['D-' + d for d in sorted(devices)])
        if rest == ['Switches', 'CXL', 'Ports']:
            return self._collection('PortCollection', switch + '/Ports',
                                    'Port Collection',
                                    [switch + '/Ports/' + p for p in ports])
        if rest[:3] == ['Switches', 'CXL', 'Ports'] and len(rest) == 4 and (
                rest[3] in ports):
            return self._cxl_port(switch + '/Ports/' + rest[3], rest[3],
                                  'Switch port ' + rest[3])
        if rest == ['Endpoints']:
            return self._collection(
                'EndpointCollection', fabric + '/Endpoints',
                'Endpoint Collection',
                [fabric + '/Endpoints/I-' + s for s in sorted(systems)] +
                [fabric + '/Endpoints/T-' + d for d in sorted(devices)] +
                [fabric + '/Endpoints/Switch'])
        if len(rest) == 2 and rest[0] == 'Endpoints':
            return self._cxl_endpoint(rest[1])
        if rest == ['Zones']:
            return self._collection(
                'ZoneCollection', fabric + '/Zones', 'Zone Collection',
                [fabric + '/Zones/' + z for z in sorted(cxl['zones'])])
        if len(rest) == 2 and rest[0] == 'Zones':
            members = cxl['zones'].get(rest[1])
            if members is None:
                return None
            endpoints = [fabric + '/Endpoints/%s-%s' % (
                'I' if m in systems else 'T', m) for m in members]
            return self._resource(
                'Zone', fabric + '/Zones/' + rest[1], rest[1],
                'CXL Zone ' + rest[1], ZoneType='ZoneOfEndpoints',
                Status={'State': 'Enabled', 'Health': 'OK'},
                Links={'Endpoints': [_link(e) for e in endpoints +
                                     [fabric + '/Endpoints/Switch']]})
        if rest == ['Connections']:
            return self._collection(
                'ConnectionCollection', fabric + '/Connections',
                'CXL Connection Collection',
                [fabric + '/Connections/' + c for c in sorted(
                    cxl['connections'])])
        if len(rest) == 2 and rest[0] == 'Connections':
            item = cxl['connections'].get(rest[1])
            if item is None:
                return None
            return self._resource(
                'Connection', fabric + '/Connections/' + rest[1], rest[1],
                item['name'], ConnectionType='Memory',
                Status={'State': 'Enabled', 'Health': 'OK'},
                MemoryChunkInfo=[{
                    'AccessCapabilities': ['Read', 'Write'],
                    'MemoryChunk': _link(self._cxl_domain(
                        item['device'], 'MemoryChunks', item['chunk']))}],
                Links={'InitiatorEndpoints': [_link(
                    fabric + '/Endpoints/I-' + item['system'])],
                    'TargetEndpoints': [_link(
                        fabric + '/Endpoints/T-' + item['device'])]})
        return None

    def _cxl_endpoint(self, eid):
        cxl = self.cxl
        fabric = self._cxl_fabric()
        uri = fabric + '/Endpoints/' + eid
        if eid == 'Switch':
            return self._resource(
                'Endpoint', uri, eid, 'CXL Switch', EndpointProtocol='CXL',
                ConnectedEntities=[{
                    'EntityType': 'Switch', 'EntityRole': 'Target',
                    'EntityLink': _link(fabric + '/Switches/CXL')}])
        kind, _, member = eid.partition('-')
        connections = [fabric + '/Connections/' + c
                       for c, v in sorted(cxl['connections'].items())
                       if member in (v['system'], v['device'])]
        zones = [_link(fabric + '/Zones/' + z)
                 for z in self._cxl_zones_of(member)]
        if kind == 'I' and member in cxl['systems']:
            system = cxl['systems'][member]
            cpu = SYSTEMS + '/' + member + '/Processors/CPU'
            return self._resource(
                'Endpoint', uri, eid, '%s Initiator' % member,
                EndpointProtocol='CXL',
                ConnectedEntities=[{
                    'EntityType': 'Processor', 'EntityRole': 'Initiator',
                    'Identifiers': [{'DurableName': (system.get('uuid') or
                                                     '').upper(),
                                     'DurableNameFormat': 'UUID'}],
                    'EntityLink': _link(cpu)}],
                Links={'Ports': [_link(cpu + '/Ports/1')], 'Zones': zones,
                       'Connections': [_link(c) for c in connections]})
        if kind == 'T' and member in cxl['devices']:
            device = cxl['devices'][member]
            return self._resource(
                'Endpoint', uri, eid, 'CXL Device Type 3 endpoint',
                EndpointProtocol='CXL',
                ConnectedEntities=[{
                    'EntityType': 'CXLDevice', 'EntityRole': 'Target',
                    'Identifiers': [{'DurableName': device['gcxlid'],
                                     'DurableNameFormat': 'GCXLID'}],
                    'EntityLink': _link(self._cxl_ld(member))}],
                Links={'Ports': [_link(fabric + '/Switches/CXL/Ports/D-' +
                                       member)], 'Zones': zones,
                       'Connections': [_link(c) for c in connections]})
        return None

    def _cxl_port(self, uri, pid, name):
        return {'@odata.type': '#Port.v1_11_0.Port', '@odata.id': uri,
                'Id': pid, 'Name': name, 'PortProtocol': 'CXL',
                'PortType': 'BidirectionalPort',
                'Status': {'State': 'Enabled', 'Health': 'OK'}}

    def _render_cxl_chassis(self, did, parts):
        cxl = self.cxl
        device = cxl['devices'][did]
        chassis = CHASSIS + '/' + did
        if not parts:
            return self._resource(
                'Chassis', chassis, did, 'Pooled CXL Type 3 device %s' % did,
                ChassisType='Module', PowerState='On',
                Status={'State': 'Enabled', 'Health': 'OK'},
                MemoryDomains=_link(chassis + '/MemoryDomains'),
                PCIeDevices=_link(chassis + '/PCIeDevices'))
        if parts == ['MemoryDomains']:
            return self._collection('MemoryDomainCollection',
                                    chassis + '/MemoryDomains',
                                    'Memory Domain Collection',
                                    [self._cxl_domain(did)])
        if parts == ['MemoryDomains', '1']:
            return {'@odata.type': '#MemoryDomain.v1_5_1.MemoryDomain',
                    '@odata.id': self._cxl_domain(did), 'Id': '1',
                    'Name': 'CXL Memory Domain',
                    'Status': {'State': 'Enabled', 'Health': 'OK'},
                    'MemorySizeMiB': device['size_mb'],
                    'AllowsMemoryChunkCreation': bool(cxl['creation']),
                    'MinMemoryChunkSizeMiB': cxl['min_mb'],
                    'MemoryChunkIncrementMiB': cxl['increment_mb'],
                    'MemoryChunks': _link(self._cxl_domain(did,
                                                           'MemoryChunks')),
                    'Links': {'CXLLogicalDevices': [_link(
                        self._cxl_ld(did))]}}
        if parts == ['MemoryDomains', '1', 'MemoryChunks']:
            collection = self._collection(
                'MemoryChunksCollection', self._cxl_domain(did,
                                                           'MemoryChunks'),
                'Memory Chunks Collection',
                [self._cxl_domain(did, 'MemoryChunks', c)
                 for c in sorted(device['chunks'], key=int)])
            return collection
        if (len(parts) == 4 and parts[:3] == ['MemoryDomains', '1',
                                              'MemoryChunks']
                and parts[3] in device['chunks']):
            chunk = device['chunks'][parts[3]]
            offset = 0
            for cid in sorted(device['chunks'], key=int):
                if cid == parts[3]:
                    break
                offset += device['chunks'][cid]['size_mb']
            return {'@odata.type': '#%s.MemoryChunks' % TYPES[
                'MemoryChunks'],
                '@odata.id': self._cxl_domain(did, 'MemoryChunks',
                                              parts[3]),
                'Id': parts[3], 'Name': chunk['name'],
                'Status': {'State': 'Enabled', 'Health': 'OK'},
                'MemoryChunkSizeMiB': chunk['size_mb'],
                'AddressRangeType': 'Volatile',
                'AddressRangeOffsetMiB': offset,
                'MediaLocation': 'Remote',
                'Links': {'CXLLogicalDevices': [_link(self._cxl_ld(did))],
                          'Endpoints': [_link(self._cxl_fabric(
                              'Endpoints', 'T-' + did))]}}
        pcie = chassis + '/PCIeDevices'
        if parts == ['PCIeDevices']:
            return self._collection('PCIeDeviceCollection', pcie,
                                    'PCIe Device Collection',
                                    [pcie + '/1'])
        if parts == ['PCIeDevices', '1']:
            return self._resource(
                'PCIeDevice', pcie + '/1', '1', 'CXL memory device',
                Status={'State': 'Enabled', 'Health': 'OK'},
                CXLDevice={'DeviceType': 'Type3',
                           'CurrentProtocolVersion': 'CXL2_0'},
                CXLLogicalDevices=_link(pcie + '/1/CXLLogicalDevices'))
        if parts == ['PCIeDevices', '1', 'CXLLogicalDevices']:
            return self._collection('CXLLogicalDeviceCollection',
                                    pcie + '/1/CXLLogicalDevices',
                                    'CXL Logical Device Collection',
                                    [self._cxl_ld(did)])
        if parts == ['PCIeDevices', '1', 'CXLLogicalDevices', '1']:
            return {'@odata.type': '#CXLLogicalDevice.v1_3_0.'
                                   'CXLLogicalDevice',
                    '@odata.id': self._cxl_ld(did), 'Id': '1',
                    'Name': 'CXL Logical Device Type 3',
                    'Identifiers': [{'DurableName': device['gcxlid'],
                                     'DurableNameFormat': 'GCXLID'}],
                    'SemanticsSupported': ['CXLio', 'CXLmem'],
                    'MemorySizeMiB': device['size_mb'],
                    'Links': {'MemoryDomains': [_link(
                        self._cxl_domain(did))]}}
        return None

    def _cxl_refused(self, kind):
        message = self.cxl['refusals'].get(kind)
        if message is None:
            return None
        return self._error(400, 'ActionNotSupported', message)

    def _cxl_change(self, method, path, headers, body):
        """POST and DELETE of memory chunks and connections; None for any
        other request."""
        cxl = self.cxl
        connections = self._cxl_fabric('Connections')
        chunk_paths = {self._cxl_domain(d, 'MemoryChunks'): d
                       for d in cxl['devices']}
        if method == 'DELETE' and (
                path.startswith(connections + '/') or
                path.rsplit('/', 1)[0] in chunk_paths):
            current = self._render(path)
            if current is None:
                return self._error(404, 'ResourceMissingAtURI',
                                   'The resource %s was not found.' % path)
            if_match = headers.get('if-match')
            if if_match is not None and if_match not in (
                    self.etag(path, current), '*'):
                return self._error(412, 'PreconditionFailed',
                                   'The ETag given in If-Match is not '
                                   'current.')
            refused = self._cxl_refused('delete')
            if refused:
                return refused
            if path.startswith(connections + '/'):
                item = cxl['connections'].pop(path.rsplit('/', 1)[-1])
                self._bump(self._cxl_domain(item['device'], 'MemoryChunks',
                                            item['chunk']))
                return self._accepted(204, {}, None)
            did = chunk_paths[path.rsplit('/', 1)[0]]
            cid = path.rsplit('/', 1)[-1]
            using = [c for c, v in sorted(cxl['connections'].items())
                     if v['device'] == did and v['chunk'] == cid]
            if using:
                return self._error(409, 'ResourceInUse',
                                   'Memory chunk %s is in connection %s.' %
                                   (path, using[0]))
            del cxl['devices'][did]['chunks'][cid]
            return self._accepted(204, {}, None)
        if method == 'POST' and path in chunk_paths:
            refused = self._cxl_refused('chunk')
            if refused:
                return refused
            did = chunk_paths[path]
            size = (body or {}).get('MemoryChunkSizeMiB') if isinstance(
                body, dict) else None
            if not isinstance(size, int) or isinstance(size, bool):
                return self._error(400, 'PropertyMissing',
                                   'The request needs MemoryChunkSizeMiB.')
            if not cxl['creation']:
                return self._error(405, 'OperationNotAllowed',
                                   'This memory domain makes no chunks.')
            if (size < cxl['min_mb'] or size % cxl['increment_mb']):
                return self._error(
                    400, 'PropertyValueNotInList',
                    'MemoryChunkSizeMiB must be at least %d in steps of %d.'
                    % (cxl['min_mb'], cxl['increment_mb']))
            if body.get('AddressRangeType', 'Volatile') != 'Volatile':
                return self._error(400, 'PropertyValueNotInList',
                                   'AddressRangeType must be Volatile.')
            free = self._cxl_free(did)
            if size > free:
                return self._error(
                    400, 'PropertyValueOutOfRange',
                    'Memory domain %s has %d MiB free; %d MiB were asked.'
                    % (self._cxl_domain(did), free, size))
            cid = str(next(cxl['next']))
            cxl['devices'][did]['chunks'][cid] = {
                'size_mb': size,
                'name': body.get('Name') or 'Memory Chunk %s' % cid}
            uri = self._cxl_domain(did, 'MemoryChunks', cid)
            return self._accepted(201, {'Location': uri}, self._render(uri))
        if method == 'POST' and path == connections:
            refused = self._cxl_refused('connection')
            if refused:
                return refused
            try:
                initiators = [link['@odata.id'].rsplit('/', 1)[-1] for link
                              in body['Links']['InitiatorEndpoints']]
                targets = [link['@odata.id'].rsplit('/', 1)[-1] for link
                           in body['Links']['TargetEndpoints']]
                chunks = [item['MemoryChunk']['@odata.id'] for item
                          in body['MemoryChunkInfo']]
            except (TypeError, KeyError):
                return self._error(
                    400, 'PropertyMissing',
                    'The request needs Links.InitiatorEndpoints, '
                    'Links.TargetEndpoints and MemoryChunkInfo.')
            if body.get('ConnectionType', 'Memory') != 'Memory':
                return self._error(400, 'PropertyValueNotInList',
                                   'ConnectionType must be Memory.')
            if (len(initiators) != 1 or len(targets) != 1 or
                    len(chunks) != 1 or
                    not initiators[0].startswith('I-') or
                    not targets[0].startswith('T-') or
                    initiators[0][2:] not in cxl['systems'] or
                    targets[0][2:] not in cxl['devices']):
                return self._error(400, 'PropertyValueConflict',
                                   'A memory connection takes one host port, '
                                   'one memory device endpoint and one '
                                   'chunk of it.')
            sid, did = initiators[0][2:], targets[0][2:]
            prefix = self._cxl_domain(did, 'MemoryChunks') + '/'
            cid = chunks[0].rstrip('/')[len(prefix):] if chunks[0].startswith(
                prefix) else None
            if cid not in cxl['devices'][did]['chunks']:
                return self._error(400, 'ResourceMissingAtURI',
                                   'Memory chunk %s is not a chunk of %s.' %
                                   (chunks[0], did))
            if not set(self._cxl_zones_of(sid)) & set(
                    self._cxl_zones_of(did)):
                return self._error(400, 'PropertyValueConflict',
                                   'Host port %s and device %s share no '
                                   'zone.' % (initiators[0], targets[0]))
            using = [c for c, v in cxl['connections'].items()
                     if v['device'] == did and v['chunk'] == cid]
            if using:
                return self._error(400, 'ResourceInUse',
                                   'Memory chunk %s is in connection %s.' %
                                   (chunks[0], using[0]))
            nid = str(next(cxl['next']))
            cxl['connections'][nid] = {
                'name': body.get('Name') or 'Connection %s' % nid,
                'system': sid, 'device': did, 'chunk': cid}
            uri = connections + '/' + nid
            return self._accepted(201, {'Location': uri}, self._render(uri))
        return None

    # ------------------------------------------- specific composition

    def _specific(self, method, path, headers, body):
        """POST /Systems composes, DELETE decomposes and (when
        ``updatable``) PATCH of Links.ResourceBlocks changes a composed
        system; None for any other request."""
        if method == 'POST' and path == SYSTEMS:
            return self._compose_system(body)
        sid = path[len(SYSTEMS) + 1:] if path.startswith(
            SYSTEMS + '/') else None
        if sid not in self.systems or method not in ('DELETE', 'PATCH'):
            return None
        uri = SYSTEMS + '/' + sid
        if_match = headers.get('if-match')
        if if_match is not None and if_match not in (
                self.etag(uri, self._render(uri)), '*'):
            return self._error(412, 'PreconditionFailed',
                               'The ETag given in If-Match is not current.')
        if method == 'DELETE':
            for bid in list(self.systems[sid]['blocks']):
                self._release(bid)
            del self.systems[sid]
            return self._accepted(204, {}, None)
        if not self.updatable:
            return self._error(405, 'PropertyNotWritable',
                               'The resource blocks of %s cannot be '
                               'changed after it was composed.' % uri)
        wanted, error = self._wanted_blocks(body, sid)
        if error:
            return error
        if not any(self.blocks[b]['kind'] == 'compute' for b in wanted):
            return self._error(400, 'PropertyValueConflict',
                               'A composed system needs a compute block.')
        for bid in list(self.systems[sid]['blocks']):
            if bid not in wanted:
                self._release(bid)
        for bid in wanted:
            if bid not in self.systems[sid]['blocks']:
                self._compose(bid, sid)
        self._bump(uri)
        return self._accepted(204, {}, None)

    def _wanted_blocks(self, body, sid=None):
        """(block ids of a request's Links.ResourceBlocks, error)."""
        try:
            links = body['Links']['ResourceBlocks']
            uris = [link['@odata.id'].rstrip('/') for link in links]
        except (TypeError, KeyError, AttributeError):
            return None, self._error(
                400, 'PropertyMissing', 'The request needs '
                'Links.ResourceBlocks, an array of links.')
        wanted = []
        for uri in uris:
            bid = uri.rsplit('/', 1)[-1]
            if uri != BLOCKS + '/' + bid or bid not in self.blocks:
                return None, self._error(
                    400, 'ResourceNotFound', 'The resource block %s does '
                    'not exist.' % uri)
            block = self.blocks[bid]
            mine = sid is not None and bid in self.systems[sid]['blocks']
            if not mine and (block['system'] is not None
                             or block['state'] != 'Unused'):
                return None, self._error(
                    400, 'ResourceInUse', 'The resource block %s is %s.' %
                    (uri, block['state']))
            if bid not in wanted:
                wanted.append(bid)
        computes = [b for b in wanted if self.blocks[b]['kind'] == 'compute']
        if len(computes) > 1:
            return None, self._error(400, 'PropertyValueConflict',
                                     'A system takes one compute block.')
        zones = set()
        for bid in computes:
            zones.update(self.blocks[bid]['zones'])
        for bid in wanted:
            if computes and not set(self.blocks[bid]['zones']) & zones:
                return None, self._error(
                    400, 'PropertyValueConflict',
                    'The resource block %s shares no resource zone with '
                    'the compute block %s.' % (BLOCKS + '/' + bid,
                                               computes[0]))
        return wanted, None

    def _compose_system(self, body):
        wanted, error = self._wanted_blocks(body)
        if error:
            return error
        name = body.get('Name') if isinstance(body, dict) else None
        if not isinstance(name, str) or not name:
            return self._error(400, 'PropertyMissing',
                               'The request needs a Name.')
        computes = [b for b in wanted if self.blocks[b]['kind'] == 'compute']
        if not computes:
            return self._error(400, 'PropertyValueConflict',
                               'A composed system needs a compute block.')
        sid = 'Composed-%d' % next(self._ids)
        self.systems[sid] = {
            'name': name, 'host_name': body.get('HostName') or name,
            # The compute block's server answers with its own UUID.
            'uuid': self.blocks[computes[0]].get('uuid'),
            'expandable': False, 'blocks': []}
        for bid in wanted:
            self._compose(bid, sid)
        uri = SYSTEMS + '/' + sid
        return self._accepted(201, {'Location': uri}, self._render(uri))

    def _compose(self, bid, sid):
        block = self.blocks[bid]
        self._attach(bid, sid)
        if block['kind'] == 'compute':
            block['state'] = 'Composed'
            return
        block['state'] = 'Composing'
        block['message'] = None
        if block['fault'] == 'stuck':
            block['pending'] = None
            return
        block['pending'] = (time.monotonic() + self.compose_delay,
                            'Failed' if block['fault'] == 'fail'
                            else 'Composed')

    def _release(self, bid):
        block = self.blocks[bid]
        self._detach(bid)
        if block['kind'] == 'compute':
            block['state'] = 'Unused'
            return
        block['pending'] = (time.monotonic() + self.compose_delay, 'Unused')
        block['health'] = block['configured_health']

    def _accepted(self, status, headers, body):
        """The answer, or 202 and a task monitor that gives it once the
        task ends (``task_polls``)."""
        if not self.task_polls:
            return status, headers, body
        mid = str(next(self._ids))
        self.monitors[mid] = {'left': self.task_polls,
                              'final': (status, headers, body)}
        return 202, {'Location': MONITORS + '/' + mid}, {
            '@odata.type': '#Task.v1_7_4.Task',
            '@odata.id': ROOT + '/TaskService/Tasks/' + mid,
            'Id': mid, 'Name': 'Task ' + mid, 'TaskState': 'Running'}

    def _page(self, path, query, answer):
        status, extra, body = answer
        skip = 0
        for part in query.split('&'):
            if part.startswith('$skip='):
                try:
                    skip = max(0, int(part[6:]))
                except ValueError:
                    return self._error(400, 'QueryParameterValueTypeError',
                                       'The value of $skip is not a '
                                       'number.')
        body = dict(body)
        members = body['Members']
        body['Members'] = members[skip:skip + self.page_size]
        if skip + self.page_size < len(members):
            body['Members@odata.nextLink'] = '%s?$skip=%d' % (
                path, skip + self.page_size)
        return status, extra, body

    def _monitor(self, mid):
        monitor = self.monitors.get(mid)
        if monitor is None:
            return self._error(404, 'ResourceMissingAtURI', 'No task.')
        if monitor['left'] > 0:
            monitor['left'] -= 1
            return 202, {'Location': MONITORS + '/' + mid}, {
                '@odata.type': '#Task.v1_7_4.Task',
                '@odata.id': ROOT + '/TaskService/Tasks/' + mid,
                'Id': mid, 'Name': 'Task ' + mid, 'TaskState': 'Running'}
        del self.monitors[mid]
        return monitor.get('final') or (204, {}, None)

    def _login(self, body):
        if not self.session_service:
            return self._error(404, 'ResourceMissingAtURI',
                               'The resource %s was not found.' % SESSIONS)
        if (not isinstance(body, dict)
                or body.get('UserName') != self.username
                or body.get('Password') != self.password):
            return 401, {}, {'error': {
                'code': 'Base.1.18.NoValidSession',
                'message': 'Invalid user name or password.'}}
        token = base64.b32encode(
            hashlib.sha256(str(next(self._ids)).encode() +
                           str(time.time()).encode()).digest()
        ).decode().rstrip('=').lower()
        sid = str(next(self._ids))
        self.sessions[token] = {
            'id': sid, 'expires': time.monotonic() + self.session_timeout}
        uri = SESSIONS + '/' + sid
        return 201, {'X-Auth-Token': token, 'Location': uri}, \
            self._render(uri)

    def __call__(self, environ, start_response):
        method = environ['REQUEST_METHOD']
        path = environ.get('PATH_INFO') or '/'
        headers = {k[5:].replace('_', '-').lower(): v
                   for k, v in environ.items() if k.startswith('HTTP_')}
        length = int(environ.get('CONTENT_LENGTH') or 0)
        raw = environ['wsgi.input'].read(length) if length else b''
        if path.startswith(MONITORS + '/') and method == 'GET':
            with self.lock:
                self.requests.append({'method': method, 'path': path,
                                      'headers': headers, 'body': None,
                                      'query': ''})
                if self._authorized(headers):
                    status, extra, body = self._monitor(
                        path.rsplit('/', 1)[-1])
                else:
                    status, extra, body = 401, {}, None
        else:
            status, extra, body = self.handle(
                method, path, headers, raw,
                query=environ.get('QUERY_STRING') or '')
        out = {'OData-Version': '4.0', 'Cache-Control': 'no-cache'}
        if isinstance(body, str):
            data = body.encode('utf-8')
        elif body is None:
            data = b''
        else:
            data = json.dumps(body, indent=1).encode('utf-8')
            out['Content-Type'] = 'application/json;charset=utf-8'
        out.update(extra)
        start_response('%d %s' % (status, _REASONS.get(status, 'Status')),
                       list(out.items()))
        return [data]


_REASONS = {200: 'OK', 201: 'Created', 202: 'Accepted', 204: 'No Content',
            400: 'Bad Request', 401: 'Unauthorized', 404: 'Not Found',
            405: 'Method Not Allowed', 412: 'Precondition Failed',
            500: 'Internal Server Error', 501: 'Not Implemented',
            502: 'Bad Gateway',
            503: 'Service Unavailable'}


class _ServerHandler(simple_server.ServerHandler):

    def handle_error(self):
        # An injected drop has closed the connection on purpose.
        if not self.environ.get('composable.dropped'):
            super(_ServerHandler, self).handle_error()


class _Handler(simple_server.WSGIRequestHandler):
    """Lets the application close the connection without an answer, and
    keeps the access log quiet."""

    def handle(self):
        self.raw_requestline = self.rfile.readline(65537)
        if not self.raw_requestline or not self.parse_request():
            return
        environ = self.get_environ()
        environ['composable.socket'] = self.connection
        handler = _ServerHandler(self.rfile, self.wfile, self.get_stderr(),
                                 environ, multithread=True)
        handler.request_handler = self
        handler.run(self.server.get_app())

    def log_message(self, format, *args):
        pass


def _dropping(app):
    def wrapped(environ, start_response):
        try:
            return app(environ, start_response)
        except _Drop:
            environ['composable.dropped'] = True
            environ['composable.socket'].shutdown(socket.SHUT_RDWR)
            raise
    return wrapped


class _Server(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


def serve(host='127.0.0.1', port=0, config=None, emulator=None):
    """Start an emulator in a thread.

    Returns (url, stop, emulator); ``stop()`` shuts it down."""
    emulator = emulator or Emulator(config)
    server = simple_server.make_server(host, port, _dropping(emulator),
                                       server_class=_Server,
                                       handler_class=_Handler)
    thread = threading.Thread(target=server.serve_forever,
                              kwargs={'poll_interval': 0.05}, daemon=True)
    thread.start()
    url = 'http://%s:%d' % (host, server.server_address[1])

    def stop():
        server.shutdown()
        server.server_close()
        thread.join(5)

    return url, stop, emulator


def main(argv=None):
    parser = argparse.ArgumentParser(
        description='A Redfish composition service emulator.')
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, default=8000)
    parser.add_argument('--config', help='JSON inventory (systems, blocks, '
                                         'zones); a small default if none')
    parser.add_argument('--profile', choices=sorted(PROFILES),
                        help='an inventory shaped like a real service')
    args = parser.parse_args(argv)
    config = PROFILES[args.profile] if args.profile else None
    if args.config:
        with open(args.config) as f:
            config = json.load(f)
    url, stop, _ = serve(args.host, args.port, config)
    sys.stdout.write('Redfish composition emulator at %s/redfish/v1\n' % url)
    sys.stdout.flush()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())
