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

"""CXL memory composed onto hosts by a fabric manager speaking Redfish.

The back end ``redfish`` of the cxl fabric driver (composable.fabric.cxl).
What it expects of the service is the shape DMTF's public-cxl and
public-cxl-multiswitch mockups give a CXL fabric manager:

- A fabric (``/redfish/v1/Fabrics/{id}``, FabricType CXL) with Switches,
  Endpoints, Zones and Connections.
- Host ports are endpoints whose ConnectedEntities name, with role
  Initiator, a Processor (or a Memory) of a computer system
  (``/redfish/v1/Systems/{id}/...``), linked to the system processor's
  port.
- A memory device's side is a target endpoint per CXL logical device:
  its ConnectedEntities are the logical device (EntityType CXLDevice,
  with a GCXLID identifier: the PCIe device serial number as eight bytes,
  most significant first, then the logical device id) and a MemoryChunk.
- The capacity lives under the device's chassis:
  ``/redfish/v1/Chassis/{id}/MemoryDomains/{domain}`` with MemorySizeMiB,
  AllowsMemoryChunkCreation, MinMemoryChunkSizeMiB and
  MemoryChunkIncrementMiB, and MemoryChunks (MemoryChunkSizeMiB,
  AddressRangeOffsetMiB, AddressRangeType; the mockups' pooled devices
  say PMEM, a host's own system memory domain says Volatile).
- Memory is given to a host by a Connection of ConnectionType Memory from
  a host port endpoint to the device's target endpoint, whose
  MemoryChunkInfo names the chunk with AccessCapabilities Read and Write.
  Zones of endpoints say which host ports may reach which devices.

A memory device of the pool is one such memory domain that a target
endpoint of the fabric leads to; its name (the memory node's) is
``<chassis id>.<domain id>``. To bind, the back end makes a chunk of the
lease's size in the domain (POST to its MemoryChunks, where the domain
allows chunk creation; else it takes an unconnected chunk of exactly
that size) and connects it to the host's port (POST to the fabric's
Connections). Both are named ``composable lease <uuid>``: a bind asked
again finds them, and an unbind removes exactly them (the locator the
bind returned names them too, for services that do not keep names).
Chunks and connections named otherwise belong to someone else: their
capacity is not the pool's.

Requests answered 202 are followed through their task monitor; a
DELETE carries If-Match with the resource's ETag and is sent again after
a 412. Nothing here logs driver_info or the credentials.
"""

import re
import time

from oslo_log import log as logging

from composable.common import exception
from composable.common import media
from composable import conf
from composable.fabric.redfish import connection
from composable.fabric.redfish import driver as redfish_driver

CONF = conf.CONF
LOG = logging.getLogger(__name__)

TAG = 'composable lease '
KEYS = ('backend', 'address', 'username', 'password', 'verify_ca',
        'fabric_id', 'system_map', 'match_by', 'timeout', 'poll_interval',
        'auth_type', 'chunk_mode')
REQUIRED = ('address', 'username', 'password')
# ``create``: a chunk of the lease's size is made (the domain must allow
# it); ``existing``: an unconnected chunk of exactly that size is taken;
# ``auto``: create where the domain allows it, else existing.
CHUNK_MODES = ('auto', 'create', 'existing')
DEFAULTS = {'verify_ca': True, 'system_map': {}, 'match_by': 'name',
            'poll_interval': 1, 'timeout': 60, 'auth_type': 'auto',
            'chunk_mode': 'auto', 'composition_mode': 'zones'}

_GCXLID = re.compile(r'^((?:[0-9A-Fa-f]{2}-){7}[0-9A-Fa-f]{2})'
                     r'(?::([0-9A-Fa-f]{1,4}))?$')
_NAME_BAD = re.compile(r'[^A-Za-z0-9._-]')


def _invalid(key, why):
    return exception.Invalid(
        "Invalid input for field 'driver_info/%s': %s" % (key, why))


def check_driver_info(driver_info):
    """The redfish back end's settings; Invalid naming the key."""
    info = redfish_driver.normalize(driver_info)
    unknown = sorted(set(info) - set(KEYS))
    if unknown:
        raise _invalid(unknown[0], 'not a setting of the cxl driver\'s '
                                   'redfish back end (%s)' % ', '.join(KEYS))
    for key in REQUIRED:
        if not isinstance(info.get(key), str) or not info[key]:
            raise _invalid(key, 'required by the redfish back end (a '
                                'non-empty string)')
    probe = dict(info)
    probe.pop('backend', None)
    probe.pop('chunk_mode', None)
    probe['composition_mode'] = 'zones'
    try:
        redfish_driver.RedfishFabricDriver()._check_driver_info(probe)
    except exception.Invalid as exc:
        # "driver_info <key> ...": name the key the way the API does.
        reason = (getattr(exc, 'kwargs', None) or {}).get(
            'reason') or exc.message
        words = reason.split()
        key = words[1] if len(words) > 1 and words[0] == 'driver_info' \
            else 'address'
        if reason.startswith('driver_info %s ' % key):
            reason = reason[len('driver_info %s ' % key):]
        raise _invalid(key, reason)
    if info.get('chunk_mode', 'auto') not in CHUNK_MODES:
        raise _invalid('chunk_mode', 'one of %s (create: a chunk of the '
                                     'lease\'s size is made; existing: an '
                                     'unconnected chunk of that size is '
                                     'taken; auto: create where the '
                                     'memory domain allows it)' %
                       ', '.join(CHUNK_MODES))
    return info


def merged(driver_info):
    info = dict(DEFAULTS)
    info.update(check_driver_info(driver_info))
    return info


def device_name(chassis_uri, domain_uri):
    chassis = chassis_uri.rstrip('/').rsplit('/', 1)[-1]
    domain = domain_uri.rstrip('/').rsplit('/', 1)[-1]
    name = _NAME_BAD.sub('-', '%s.%s' % (chassis, domain)).lstrip('._-')
    return name[:64] or 'cxl'


def serial_of(identifiers):
    """(serial as the kernel prints it, logical device id or None) of a
    GCXLID among ``identifiers``; (None, None) without one."""
    for item in identifiers or []:
        if not isinstance(item, dict) or item.get(
                'DurableNameFormat') != 'GCXLID':
            continue
        match = _GCXLID.match(str(item.get('DurableName') or '').strip())
        if match:
            serial = '0x%x' % int(match.group(1).replace('-', ''), 16)
            ld = int(match.group(2), 16) if match.group(2) else None
            return serial, ld
    return None, None


def _link(value):
    if isinstance(value, dict) and isinstance(value.get('@odata.id'), str):
        return value['@odata.id'].rstrip('/')
    return None


def _links(value):
    if isinstance(value, dict):
        value = [value]
    return [u for u in (_link(v) for v in value or []) if u] if isinstance(
        value, list) else []


def _int(value, default=0):
    return value if isinstance(value, int) and not isinstance(
        value, bool) else default


def _body(data):
    if not isinstance(data, dict):
        raise connection.BadAnswer(reason='not a JSON object')
    return data


def _reason(exc):
    return getattr(exc, 'message', None) or str(exc)


class Domain(object):
    """A memory domain of a chassis that the fabric reaches: one memory
    device of the pool."""

    def __init__(self, uri, name, body):
        self.uri = uri
        self.name = name
        self.size_mb = body.get('MemorySizeMiB')
        self.allows_creation = body.get('AllowsMemoryChunkCreation') is True
        self.min_mb = max(1, _int(body.get('MinMemoryChunkSizeMiB'), 1))
        self.increment_mb = max(1, _int(body.get('MemoryChunkIncrementMiB'),
                                        1))
        self.chunks_path = _link(body.get('MemoryChunks'))
        links = body.get('Links') if isinstance(body.get('Links'),
                                                dict) else {}
        self.logical_devices = _links(links.get('CXLLogicalDevices'))
        # chunk URI -> body
        self.chunks = {}
        self.targets = []
        self.serial = None
        self.ld_id = None

    def chunk_mb(self, uri):
        return _int(self.chunks.get(uri, {}).get('MemoryChunkSizeMiB'))


class Inventory(object):
    """What the fabric manager says now: the fabric's zoning, its memory
    connections and the memory domains its target endpoints lead to."""

    def __init__(self, zoning):
        self.zoning = zoning
        # connection URI -> (name, [chunk URIs], initiators, targets)
        self.memory_connections = {}
        self.domains = {}

    def connected_chunks(self):
        found = {}
        for uri, (name, chunks, _, _) in self.memory_connections.items():
            for chunk in chunks:
                found.setdefault(chunk, []).append((uri, name))
        return found

    def accounting(self, domain, mode):
        """(capacity the pool may lend, free MiB the fabric could give
        now) of a domain."""
        connected = self.connected_chunks()
        sizes = {u: domain.chunk_mb(u) for u in domain.chunks}
        ours = {u for u, body in domain.chunks.items()
                if str(body.get('Name') or '').startswith(TAG)}

        def held_by_others(uri):
            return any(not (name or '').startswith(TAG)
                       for _, name in connected.get(uri, []))

        if self._creates(domain, mode):
            total = _int(domain.size_mb) or sum(sizes.values())
            foreign = sum(s for u, s in sizes.items() if u not in ours)
            return max(0, total - foreign), max(0, total - sum(
                sizes.values()))
        usable = sum(s for u, s in sizes.items() if not held_by_others(u))
        free = sum(s for u, s in sizes.items() if u not in connected)
        return usable, free

    @staticmethod
    def _creates(domain, mode):
        return mode == 'create' or (mode == 'auto' and
                                    domain.allows_creation)

    def reach(self, domain):
        """The system URIs whose host ports may reach the domain's target
        endpoints: those zoned with one (every system with a host port
        where the fabric has no zones of endpoints), and those connected
        to one."""
        zoning = self.zoning
        targets = set(domain.targets)
        zones = [z for z in zoning.zones.values() if z.holds_endpoints]
        found = set()
        if not zones:
            found.update(zoning.bindable_systems())
        for zone in zones:
            if targets & zoning.members(zone.uri):
                found.update(zoning.zone_systems(zone.uri))
        for target in targets:
            found.update(zoning.holders(target))
        return sorted(found)

    def target_for(self, domain, port):
        """The domain's target endpoint to connect ``port`` to: one it
        shares a zone with (the first where none says)."""
        zoning = self.zoning
        for target in domain.targets:
            for zone in zoning.zones.values():
                members = zoning.members(zone.uri)
                if (zone.holds_endpoints and port in members and
                        target in members):
                    return target
        return domain.targets[0]

    def ports(self, domain, system):
        """The system's host port endpoints that reach the domain."""
        zoning = self.zoning
        mine = zoning.initiators_of(system)
        zones = [z for z in zoning.zones.values() if z.holds_endpoints]
        if not zones:
            return mine
        targets = set(domain.targets)
        found = set()
        for zone in zones:
            members = zoning.members(zone.uri)
            if targets & members:
                found.update(u for u in mine if u in members)
        return sorted(found)


class RedfishCxl(object):
    """The redfish back end (driver_info checked by the caller)."""

    def __init__(self):
        self._rf = redfish_driver.RedfishFabricDriver()

    # ------------------------------------------------------- reading

    def _read(self, conn, info):
        rf = self._rf
        zoning = rf._zoning(conn, info)
        inventory = Inventory(zoning)
        for uri in sorted(zoning.connections):
            body = _body(conn.get(uri).body)
            chunks = [_link(i.get('MemoryChunk'))
                      for i in body.get('MemoryChunkInfo') or []
                      if isinstance(i, dict)]
            item = zoning.connections[uri]
            inventory.memory_connections[uri] = (
                body.get('Name'), [c for c in chunks if c],
                item.initiators, item.targets)
        # Which chunk and logical device each target endpoint leads to.
        leads = {}
        identifiers = {}
        types = {}
        for uri, endpoint in zoning.endpoints.items():
            for entity in endpoint.targets():
                if entity.link and entity.type in ('MemoryChunk',
                                                   'CXLDevice'):
                    leads.setdefault(entity.link, set()).add(uri)
        for chassis in rf._collection(conn,
                                      rf._service_path(conn, 'Chassis')):
            # A chassis, domain or chunk that cannot be read fails the
            # whole reading: its devices would look gone, and the sync
            # would take their memory nodes out of the pool.
            body = _body(conn.get(chassis).body)
            domains = _link(body.get('MemoryDomains'))
            if not domains:
                continue
            for uri in rf._collection(conn, domains):
                uri = uri.rstrip('/')
                domain = Domain(uri, device_name(chassis, uri),
                                _body(conn.get(uri).body))
                if domain.chunks_path:
                    for chunk in rf._collection(conn, domain.chunks_path):
                        chunk = chunk.rstrip('/')
                        domain.chunks[chunk] = _body(conn.get(chunk).body)
                targets = set()
                for link in list(domain.chunks) + domain.logical_devices:
                    targets.update(leads.get(link, ()))
                for chunk in domain.chunks.values():
                    links = chunk.get('Links')
                    if isinstance(links, dict):
                        targets.update(u for u in _links(
                            links.get('Endpoints')) if u in zoning.endpoints)
                if not targets:
                    # Memory of the chassis no fabric endpoint leads to.
                    continue
                domain.targets = sorted(targets)
                devices = list(domain.logical_devices)
                for target in domain.targets:
                    devices += [e.link for e in
                                zoning.endpoints[target].targets()
                                if e.type == 'CXLDevice' and e.link]
                kind = self._device_type(conn, devices, types)
                if kind not in (None, 'Type3'):
                    # An accelerator's own memory (CXL Type 1 or 2): not
                    # memory to pool.
                    LOG.debug('Redfish service %(addr)s: memory domain '
                              '%(uri)s is of a CXL %(kind)s device; not '
                              'pooled', {'addr': conn.address, 'uri': uri,
                                         'kind': kind})
                    continue
                for device in devices:
                    if device not in identifiers:
                        try:
                            identifiers[device] = _body(
                                conn.get(device).body).get('Identifiers')
                        except redfish_driver.LOCAL_ERRORS:
                            identifiers[device] = None
                    domain.serial, domain.ld_id = serial_of(
                        identifiers[device])
                    if domain.serial:
                        break
                if domain.name in inventory.domains:
                    LOG.warning('Redfish service %(addr)s: memory domains '
                                '%(a)s and %(b)s have the same device '
                                'name %(name)s; only the first is used',
                                {'addr': conn.address, 'name': domain.name,
                                 'a': inventory.domains[domain.name].uri,
                                 'b': uri})
                    continue
                inventory.domains[domain.name] = domain
        return inventory

    @staticmethod
    def _device_type(conn, logical_devices, types):
        """CXLDevice.DeviceType (Type1, Type2, Type3) of the PCIe device
        a logical device belongs to (``.../PCIeDevices/{id}/
        CXLLogicalDevices/{ld}``), or None where none says."""
        for device in logical_devices:
            head, sep, _ = device.partition('/CXLLogicalDevices/')
            if not sep:
                continue
            if head not in types:
                try:
                    body = _body(conn.get(head).body)
                    info = body.get('CXLDevice')
                    types[head] = (info.get('DeviceType') if isinstance(
                        info, dict) else None)
                except redfish_driver.LOCAL_ERRORS:
                    types[head] = None
            if types[head]:
                return types[head]
        return None

    # ------------------------------------------------------ discovery

    def discover_memory(self, fabric, info):
        rf = self._rf
        found = []
        with rf._connect(info) as conn:
            inventory = self._read(conn, info)
            systems, unreadable = rf._systems(conn)
            names = rf._host_names(conn, info, systems, unreadable,
                                   fabric.get('hosts') or ())
            for name, domain in sorted(inventory.domains.items()):
                capacity, free = inventory.accounting(domain,
                                                      info['chunk_mode'])
                granule = media.CXL_GRANULE_MB
                found.append({
                    'name': name, 'serial': domain.serial,
                    'capacity_mb': capacity // granule * granule,
                    'free_mb': free,
                    'free_chunks': free // granule,
                    'hosts': sorted(names.get(s, s)
                                    for s in inventory.reach(domain)),
                    'address': domain.uri})
        return found

    # ----------------------------------------------------------- bind

    @staticmethod
    def _deadline(info):
        # Never later than the conductor's wait (less a margin for the
        # answer): past that it undoes the bind.
        return time.monotonic() + min(
            float(info['timeout']),
            max(1.0, CONF.fabric.operation_timeout -
                redfish_driver.OPERATION_MARGIN))

    @staticmethod
    def _one_operation(info, lease_uuid, name):
        """One bind or unbind of a lease's memory on a device at a time
        in this process: the unbind undoing a bind the conductor stopped
        waiting for waits for it, and sees what it made."""
        return redfish_driver.one_operation(
            info['address'], 'cxl memory of lease %s on %s' % (lease_uuid,
                                                               name))

    def bind_memory(self, fabric, info, name, host, size_mb, lease_uuid):
        rf = self._rf
        if not size_mb or not lease_uuid:
            raise exception.DriverError(
                reason='fabric %s (cxl, redfish) needs the size and the '
                       'lease to compose memory of device %s' % (
                           fabric['name'], name))
        size_mb = int(size_mb)
        tag = TAG + lease_uuid
        deadline = self._deadline(info)
        with self._one_operation(info, lease_uuid, name), \
                rf._connect(info) as conn:
            inventory = self._read(conn, info)
            domain = self._domain(fabric, inventory, name)
            system, _ = rf._system(conn, info, fabric, host)
            ports = inventory.ports(domain, system.uri)
            if not ports:
                names = rf._host_names(conn, info, *rf._systems(conn))
                raise exception.DriverError(
                    reason='host %s (system %s) has no port on fabric %s '
                           'that reaches CXL memory device %s (hosts that '
                           'reach it: %s)' % (
                               host['name'], system.uri, fabric['name'],
                               name, ', '.join(
                                   names.get(s, s)
                                   for s in inventory.reach(domain)) or
                               'none'))
            made = self._made(inventory, domain, tag)
            if made is not None:
                uri, chunk, initiators = made
                if set(initiators) & set(ports):
                    LOG.info('Fabric %(fabric)s: memory of lease %(lease)s '
                             'on device %(name)s is connected already '
                             '(%(uri)s)', {'fabric': fabric['name'],
                                           'lease': lease_uuid,
                                           'name': name, 'uri': uri})
                    return self._locator(
                        domain, chunk, uri,
                        domain.chunk_mb(chunk) or size_mb,
                        str(domain.chunks.get(chunk, {}).get(
                            'Name')) == tag)
                raise exception.DriverError(
                    reason='memory of lease %s on CXL memory device %s is '
                           'connected to another host port (%s); unbind '
                           'it first' % (lease_uuid, name,
                                         ', '.join(initiators)))
            chunk, created = self._chunk(conn, info, fabric, inventory,
                                         domain, size_mb, tag, deadline)
            try:
                uri = self._connect_chunk(conn, info, inventory, domain,
                                          ports[0], chunk, tag, deadline)
            except exception.DriverError as exc:
                if created:
                    try:
                        rf._delete(conn, info, chunk, _body, deadline)
                    except exception.DriverError as undo:
                        LOG.error('Fabric %(fabric)s: chunk %(chunk)s made '
                                  'for lease %(lease)s could not be '
                                  'deleted after its connection failed: '
                                  '%(reason)s; the next bind or unbind of '
                                  'the lease removes it',
                                  {'fabric': fabric['name'],
                                   'chunk': chunk, 'lease': lease_uuid,
                                   'reason': _reason(undo)})
                raise exception.DriverError(
                    reason='connecting %d MiB of CXL memory device %s to '
                           'host %s on fabric %s failed: %s' % (
                               size_mb, name, host['name'], fabric['name'],
                               _reason(exc)))
            LOG.info('Fabric %(fabric)s: %(mb)d MiB of CXL memory device '
                     '%(name)s connected to host %(host)s for lease '
                     '%(lease)s (chunk %(chunk)s, connection %(uri)s)',
                     {'fabric': fabric['name'], 'mb': size_mb,
                      'name': name, 'host': host['name'],
                      'lease': lease_uuid, 'chunk': chunk, 'uri': uri})
            return self._locator(domain, chunk, uri, size_mb, created)

    @staticmethod
    def _locator(domain, chunk, uri, size_mb, created):
        return {'serial': domain.serial, 'device': domain.name,
                'ld_id': domain.ld_id, 'chunk': chunk, 'connection': uri,
                'size_mb': size_mb, 'created': bool(created)}

    @staticmethod
    def _domain(fabric, inventory, name):
        domain = inventory.domains.get(name)
        if domain is None:
            raise exception.DriverError(
                reason='fabric %s has no CXL memory device %s (its '
                       'devices: %s)' % (fabric['name'], name, ', '.join(
                           sorted(inventory.domains)) or 'none'))
        return domain

    @staticmethod
    def _made(inventory, domain, tag):
        """(connection URI, chunk, initiators) of the lease's connection
        to a chunk of the domain, or None."""
        for uri, (name, chunks, initiators, _) in sorted(
                inventory.memory_connections.items()):
            if name != tag:
                continue
            for chunk in chunks:
                if chunk in domain.chunks:
                    return uri, chunk, initiators
        return None

    def _chunk(self, conn, info, fabric, inventory, domain, size_mb, tag,
               deadline):
        """(chunk URI, True when made here) of ``size_mb`` for the
        lease."""
        connected = inventory.connected_chunks()
        for uri, body in sorted(domain.chunks.items()):
            # Made by an earlier try whose connection was never made.
            if body.get('Name') == tag and uri not in connected:
                return uri, True
        mode = info['chunk_mode']
        capacity, free = inventory.accounting(domain, mode)
        if not inventory._creates(domain, mode):
            for uri in sorted(domain.chunks):
                if (uri not in connected and
                        domain.chunk_mb(uri) == size_mb):
                    return uri, False
            raise exception.DriverError(
                reason='CXL memory device %s on fabric %s makes no chunks '
                       '(AllowsMemoryChunkCreation is not true) and has no '
                       'unconnected chunk of %d MiB; %d MiB are in '
                       'unconnected chunks' % (domain.name, fabric['name'],
                                               size_mb, free))
        if size_mb < domain.min_mb or size_mb % domain.increment_mb:
            raise exception.DriverError(
                reason='CXL memory device %s on fabric %s makes chunks of '
                       'at least %d MiB in steps of %d MiB; %d MiB is not '
                       'one' % (domain.name, fabric['name'], domain.min_mb,
                                domain.increment_mb, size_mb))
        if free < size_mb:
            raise exception.DriverError(
                reason='CXL memory device %s on fabric %s has %d MiB free, '
                       'the lease needs %d MiB' % (
                           domain.name, fabric['name'], free, size_mb))
        if not domain.chunks_path:
            raise exception.DriverError(
                reason='memory domain %s of fabric %s has no MemoryChunks '
                       'collection to make a chunk in' % (domain.uri,
                                                          fabric['name']))
        body = {'Name': tag, 'MemoryChunkSizeMiB': size_mb,
                'AddressRangeType': 'Volatile'}
        try:
            response = conn.post(domain.chunks_path, body)
            response = self._rf._task_answer(conn, info, response,
                                             domain.chunks_path, deadline)
        except connection.HTTPFailure as exc:
            # A request that got through before its answer was lost.
            again = self._read(conn, info).domains.get(domain.name)
            for uri, chunk in sorted((again.chunks if again else {}).items()):
                if chunk.get('Name') == tag:
                    return uri, True
            raise exception.DriverError(
                reason='the fabric manager of fabric %s refused to make a '
                       'chunk of %d MiB on CXL memory device %s: %s' % (
                           fabric['name'], size_mb, domain.name,
                           '; '.join(exc.messages) or _reason(exc)))
        return self._created(conn, response, domain.chunks_path), True

    @staticmethod
    def _created(conn, response, path):
        uri = response.headers.get('Location')
        if not uri and isinstance(response.body, dict):
            uri = response.body.get('@odata.id')
        if not uri:
            raise exception.DriverError(
                reason='Redfish service %s made a resource in %s but did '
                       'not say where (no Location, no @odata.id)' % (
                           conn.address, path))
        if '://' in uri:
            uri = '/' + uri.split('://', 1)[1].split('/', 1)[1]
        return uri.rstrip('/')

    def _connect_chunk(self, conn, info, inventory, domain, port, chunk,
                       tag, deadline):
        path = inventory.zoning.fabric.connections
        if not path:
            raise exception.DriverError(
                reason='fabric %s of Redfish service %s has no Connections '
                       'to give memory with' % (inventory.zoning.fabric.uri,
                                                conn.address))
        body = {'Name': tag, 'ConnectionType': 'Memory',
                'MemoryChunkInfo': [{'AccessCapabilities': ['Read', 'Write'],
                                     'MemoryChunk': {'@odata.id': chunk}}],
                'Links': {'InitiatorEndpoints': [{'@odata.id': port}],
                          'TargetEndpoints': [{'@odata.id':
                                               inventory.target_for(
                                                   domain, port)}]}}
        try:
            response = conn.post(path, body)
            response = self._rf._task_answer(conn, info, response, path,
                                             deadline)
        except connection.HTTPFailure as exc:
            again = self._read(conn, info)
            for uri, (name, chunks, _, _) in sorted(
                    again.memory_connections.items()):
                if name == tag and chunk in chunks:
                    return uri
            raise exception.DriverError(
                reason='the fabric manager refused the connection of chunk '
                       '%s to host port %s: %s' % (
                           chunk, port,
                           '; '.join(exc.messages) or _reason(exc)))
        return self._created(conn, response, path)

    # --------------------------------------------------------- unbind

    def unbind_memory(self, fabric, info, name, host, lease_uuid,
                      locator=None):
        rf = self._rf
        locator = locator if isinstance(locator, dict) else {}
        tag = TAG + (lease_uuid or '')
        deadline = self._deadline(info)
        with self._one_operation(info, lease_uuid, name), \
                rf._connect(info) as conn:
            inventory = self._read(conn, info)
            domain = inventory.domains.get(name)
            chunks = set()
            if domain is not None:
                chunks = {u for u, b in domain.chunks.items()
                          if lease_uuid and b.get('Name') == tag}
            if locator.get('chunk') and locator.get('created'):
                chunks.add(locator['chunk'])
            doomed = []
            for uri, (cname, cchunks, _, _) in sorted(
                    inventory.memory_connections.items()):
                mine = (lease_uuid and cname == tag and (
                    domain is None or set(cchunks) & set(domain.chunks)))
                if mine or uri == locator.get('connection'):
                    doomed.append(uri)
            for uri in doomed:
                self._remove(conn, info, fabric, uri, 'connection', name,
                             lease_uuid, deadline)
            for uri in sorted(chunks):
                self._remove(conn, info, fabric, uri, 'memory chunk', name,
                             lease_uuid, deadline)
            if doomed or chunks:
                LOG.info('Fabric %(fabric)s: memory of lease %(lease)s on '
                         'CXL memory device %(name)s taken from host '
                         '%(host)s (%(gone)s)',
                         {'fabric': fabric['name'], 'lease': lease_uuid,
                          'name': name, 'host': (host or {}).get('name'),
                          'gone': ', '.join(doomed + sorted(chunks))})
        return None

    def _remove(self, conn, info, fabric, uri, what, name, lease_uuid,
                deadline):
        try:
            self._rf._delete(conn, info, uri, _body, deadline)
        except exception.DriverError as exc:
            messages = getattr(exc, 'messages', None) or []
            raise exception.DriverError(
                reason='the fabric manager of fabric %s refused to delete '
                       '%s %s (memory of lease %s on CXL memory device %s): '
                       '%s' % (fabric['name'], what, uri, lease_uuid, name,
                               '; '.join(messages) or _reason(exc)))
