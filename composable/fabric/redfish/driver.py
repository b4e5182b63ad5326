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

"""A fabric driver for Redfish composition services (DMTF DSP2050).

A pooled device is a ResourceBlock (``device['address']`` is its
``@odata.id``); a host is an expandable ComputerSystem. Binding adds the
block to the host's system with ``ComputerSystem.AddResourceBlock`` and
waits until the block is ``Composed``; unbinding removes it with
``ComputerSystem.RemoveResourceBlock`` and waits until it is ``Unused``.
A block joins only a system it shares a ResourceZone with.

On a service that composes whole systems instead (DSP2050's specific
composition: systems offer only Reset, the Systems collection has the
ComputerSystemComposition capability), binding composes the host's
system again with the block: a PATCH of its Links.ResourceBlocks where
the service allows it, else DELETE of the system and POST of a new one
to the Systems collection with the same name; unbinding does the same
without the block. ``composition_mode`` forces one mode or the other.

Every action carries ``If-Match`` with the system's current ETag; when
the service answers 412 (someone changed the system meanwhile) the system
is read again and the action repeated with the fresh ETag, a bounded
number of times. Actions answered 202 are followed through their task
monitor.

A host maps to exactly one system (``system_map`` by @odata.id, UUID or
a unique name; else the one system with the DMI UUID the host's agent
reported; else the one system with the host's UUID or unique name); a
name or DMI UUID several systems share is refused, never guessed.
Discovery classifies each block by its members, reports blocks no host
can be given (``not_poolable``) and blocks the service will not compose
now (``unavailable``) with the reason, and makes one unreadable block
unknown (``error``) rather than failing the whole fabric.

On a PCIe or CXL fabric manager (composition mode ``zones``: no
resource blocks, but /redfish/v1/Fabrics/{id} with Zones and Endpoints)
a pooled device is a target endpoint of the fabric and a bind adds it to
the host's zone (PATCH of the zone's Links.Endpoints with If-Match), or
connects it to the host's initiator (POST of a Connection) where the
host has no zone of its own; see composable/fabric/redfish/zones.py.

driver_info keys: ``address``, ``username``, ``password``, ``verify_ca``,
``system_map``, ``match_by``, ``poll_interval``, ``timeout``, ``mode``,
``auth_type``, ``composition_mode``, ``fabric_id`` (see
doc/source/admin/fabric-redfish.rst and fabric-redfish-zones.rst).
"""

import contextlib
import json
import math
import re
import threading
import time
import urllib.parse

from oslo_log import log as logging

from composable.common import exception
from composable.common import locator as locator_mod
from composable import conf
from composable.fabric import base
from composable.fabric.redfish import connection
from composable.fabric.redfish import models
from composable.fabric.redfish import zones as fabric_zones

CONF = conf.CONF
LOG = logging.getLogger(__name__)

REQUIRED = ('address', 'username', 'password')
OPTIONAL = ('verify_ca', 'system_map', 'match_by', 'poll_interval',
            'timeout', 'mode', 'auth_type', 'composition_mode',
            'fabric_id')
MATCH_BY = ('name', 'uuid')
MODES = ('expandable',)
# How a block joins a host's system: ``expandable`` grows the system
# (ComputerSystem.AddResourceBlock), ``specific`` composes the system
# again with the block (POST /redfish/v1/Systems, or a PATCH of its
# Links.ResourceBlocks where the service allows it); ``zones`` puts the
# device's endpoint into the host's zone of a fabric
# (/redfish/v1/Fabrics/{id}, or a Connection where the host has no zone
# of its own); ``auto`` asks the service which it offers.
COMPOSITION_MODES = ('auto', 'expandable', 'specific', 'zones')
DEFAULTS = {'verify_ca': True, 'system_map': {}, 'match_by': 'name',
            'poll_interval': 1, 'timeout': 60, 'mode': 'expandable',
            'auth_type': 'auto', 'composition_mode': 'auto'}
# How many times an action refused with 412 is tried again.
PRECONDITION_RETRIES = 5
# Pages of one collection (Members@odata.nextLink) read at most: more is
# an error, never a silent cut.
MAX_PAGES = 1000
# Most members (and members of members) read of one block.
MEMBER_LIMIT = 64


_UUID = re.compile(r'^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
                   r'[0-9a-f]{12}$', re.I)


def dmi_uuid(host):
    """The SMBIOS (DMI) UUID the host's compute agent reported, lower
    case, or None."""
    props = (host or {}).get('properties')
    value = props.get('dmi_uuid') if isinstance(props, dict) else None
    if isinstance(value, str) and _UUID.match(value.strip()):
        return value.strip().lower()
    return None


def _reason(exc):
    return getattr(exc, 'message', None) or str(exc)


def _describe(system):
    names = [n for n in (system.name, system.host_name) if n]
    return '%s (%s)' % (system.uri, ', '.join(
        sorted(set(names), key=names.index))) if names else system.uri


def _identities(systems):
    """system URI -> the name (lower case) that identifies it: its
    HostName if no other system has it as HostName or Name, else its
    Name if unique so; None when neither is (a host is then matched to
    it only through system_map)."""
    count = {}
    for system in systems:
        for value in system.names():
            count[value] = count.get(value, 0) + 1
    found = {}
    for system in systems:
        found[system.uri] = None
        for value in (system.host_name, system.name):
            if value and count[value.lower()] == 1:
                found[system.uri] = value.lower()
                break
    return found


_TRUE = ('true', 'yes', 'on', '1')
_FALSE = ('false', 'no', 'off', '0')


# Longest poll interval and operation time a fabric may ask for.
MAX_SECONDS = 600


def _number(value):
    return (not isinstance(value, bool)
            and isinstance(value, (int, float)) and math.isfinite(value)
            and 0 < value <= MAX_SECONDS)


def normalize(driver_info):
    """driver_info with the string forms the CLI sends (``timeout=60``,
    ``verify_ca=false``, ``system_map={"h": "/redfish/v1/Systems/1"}``)
    turned into numbers, booleans and objects."""
    if not isinstance(driver_info, dict):
        return driver_info
    info = dict(driver_info)
    for key in ('poll_interval', 'timeout'):
        if isinstance(info.get(key), str):
            try:
                info[key] = float(info[key])
            except ValueError:
                pass
    verify = info.get('verify_ca')
    if isinstance(verify, str) and verify.strip().lower() in _TRUE:
        info['verify_ca'] = True
    elif isinstance(verify, str) and verify.strip().lower() in _FALSE:
        info['verify_ca'] = False
    if isinstance(info.get('system_map'), str):
        try:
            info['system_map'] = json.loads(info['system_map'])
        except ValueError:
            pass
    return info


# Seconds left to the conductor between the driver's own deadline and
# [fabric]operation_timeout.
OPERATION_MARGIN = 5

_BLOCK_LOCKS = {}
_BLOCK_LOCKS_GUARD = threading.Lock()


@contextlib.contextmanager
def one_operation(address, block_uri):
    """One bind or unbind of a resource block at a time in this process.

    A call the conductor stopped waiting for ([fabric]operation_timeout)
    goes on in its thread; the unbind that undoes the failed bind waits
    here for it, so an AddResourceBlock that lands late is removed after
    it, not before. Two conductors never work on one lease at once (its
    reservation), and a block belongs to one lease.
    """
    key = (address, block_uri)
    with _BLOCK_LOCKS_GUARD:
        lock = _BLOCK_LOCKS.setdefault(key, threading.Lock())
    if not lock.acquire(timeout=CONF.fabric.operation_timeout):
        raise exception.DriverError(
            reason='an earlier operation on resource block %s of the '
                   'Redfish service %s is still running; try again '
                   'later' % (block_uri, address))
    try:
        yield
    finally:
        lock.release()


# What makes one resource, not the whole fabric, unknown: an error
# status (404 of a block removed after the listing) or an answer that is
# not the resource. A service that does not answer at all fails the
# discovery.
LOCAL_ERRORS = (connection.HTTPFailure, connection.BadAnswer)


def _unknown(uri, reason):
    return {'address': uri.rstrip('/'), 'error': reason, 'health': None,
            'hosts': None, 'bound_to': None}


class RedfishFabricDriver(base.FabricDriver):

    # ------------------------------------------------------ driver_info

    def _check_driver_info(self, driver_info):
        info = normalize(driver_info)
        if not isinstance(info, dict):
            raise exception.Invalid(reason='driver_info must be an object')
        unknown = sorted(set(info) - set(REQUIRED) - set(OPTIONAL))
        if unknown:
            raise exception.Invalid(
                reason='driver_info has unknown key(s) %s; the redfish '
                       'driver takes %s' % (', '.join(unknown),
                                            ', '.join(REQUIRED + OPTIONAL)))
        for key in REQUIRED:
            if not isinstance(info.get(key), str) or not info[key]:
                raise exception.Invalid(
                    reason='driver_info %s is required (a non-empty '
                           'string)' % key)
        try:
            url = urllib.parse.urlsplit(info['address'])
            # Reading the port checks it (a ValueError when out of range).
            url.port
        except ValueError:
            url = None
        if (url is None or url.scheme not in ('http', 'https')
                or not url.hostname or url.username or url.password
                or url.query):
            raise exception.Invalid(
                reason='driver_info address must be an http:// or '
                       'https:// URL of the Redfish service, without '
                       'credentials or query')
        verify = info.get('verify_ca', True)
        if not isinstance(verify, bool) and not (
                isinstance(verify, str) and verify):
            raise exception.Invalid(
                reason='driver_info verify_ca must be true, false or the '
                       'path of a CA bundle')
        system_map = info.get('system_map', {})
        if not isinstance(system_map, dict) or not all(
                isinstance(k, str) and k and isinstance(v, str)
                and v.strip() and ('/' not in v or v.startswith('/'))
                for k, v in system_map.items()):
            raise exception.Invalid(
                reason='driver_info system_map must map host names to '
                       'systems: a system @odata.id path '
                       '("/redfish/v1/Systems/.."), UUID or unique name')
        if info.get('match_by', 'name') not in MATCH_BY:
            raise exception.Invalid(
                reason='driver_info match_by must be one of %s' %
                ', '.join(MATCH_BY))
        for key in ('poll_interval', 'timeout'):
            if key in info and not _number(info[key]):
                raise exception.Invalid(
                    reason='driver_info %s must be a number of seconds '
                           'above 0 and at most %d' % (key, MAX_SECONDS))
        if info.get('mode', 'expandable') not in MODES:
            raise exception.Invalid(
                reason='driver_info mode must be one of %s' %
                ', '.join(MODES))
        if info.get('composition_mode', 'auto') not in COMPOSITION_MODES:
            raise exception.Invalid(
                reason='driver_info composition_mode must be one of %s '
                       '(auto: what the service offers; expandable: '
                       'ComputerSystem.AddResourceBlock; specific: systems '
                       'composed by POST /redfish/v1/Systems; zones: '
                       'endpoints zoned on /redfish/v1/Fabrics/{id})' %
                ', '.join(COMPOSITION_MODES))
        if 'fabric_id' in info:
            if not isinstance(info['fabric_id'], str) or not info[
                    'fabric_id'].strip():
                raise exception.Invalid(
                    reason='driver_info fabric_id must be the Id or '
                           '@odata.id of a fabric of the service (a '
                           'non-empty string)')
            if info.get('composition_mode', 'auto') not in ('auto',
                                                            'zones'):
                raise exception.Invalid(
                    reason='driver_info fabric_id names the fabric of '
                           'composition_mode zones; it means nothing with '
                           'composition_mode %s' % info['composition_mode'])
        if info.get('auth_type', 'auto') not in connection.AUTH_TYPES:
            raise exception.Invalid(
                reason='driver_info auth_type must be one of %s (auto: a '
                       'session where the service has a SessionService, '
                       'else HTTP Basic)' % ', '.join(connection.AUTH_TYPES))

    def validate_driver_info(self, driver_info):
        """The settings' own checks, then, when ``system_map`` names
        systems, that each names exactly one system of the service (a
        service that cannot be reached now is not an error: the sync
        and every bind check the map again)."""
        self._check_driver_info(driver_info)
        info = self._merged(driver_info)
        zoned = info['composition_mode'] == 'zones' or info.get('fabric_id')
        if not info['system_map'] and not zoned:
            return
        try:
            with self._connect(info) as conn:
                if zoned:
                    self._fabric(conn, info)
                systems, unreadable = self._systems(conn)
                for host in sorted(info['system_map']):
                    self._resolve(conn, info, systems, unreadable, host)
        except exception.Invalid:
            raise
        except exception.DriverError as exc:
            LOG.warning('The system_map of Redfish service %(addr)s could '
                        'not be checked now: %(reason)s',
                        {'addr': info['address'], 'reason': _reason(exc)})

    def _merged(self, driver_info):
        merged = dict(DEFAULTS)
        merged.update(normalize(driver_info))
        return merged

    def _info(self, fabric):
        info = normalize(fabric.get('driver_info') or {})
        self._check_driver_info(info)
        merged = dict(DEFAULTS)
        merged.update(info)
        return merged

    def _connect(self, info):
        # One request never outlasts what the conductor waits for.
        return connection.Connection(
            info['address'], info['username'], info['password'],
            verify=info['verify_ca'],
            timeout=min(float(info['timeout']),
                        float(CONF.fabric.operation_timeout)),
            auth_type=info['auth_type'])

    # -------------------------------------------------------- reading

    def _collection(self, conn, path, expand=False):
        """Every member URI of a collection, page after page
        (``Members@odata.nextLink``). With ``expand``, and where the
        service supports ``$expand``, the members come in full and are
        kept for :meth:`Connection.read_member`."""
        query = conn.expand_query if expand else None
        first = '%s?%s' % (path, query) if query else path
        uris, pages, page = [], [first], first
        while True:
            (found, following, count, full), _ = conn.read(page,
                                                           models.page)
            uris += found
            if query:
                conn.expanded.update(full)
            if following and query and '$expand' not in following:
                following = '%s%s%s' % (
                    following, '&' if '?' in following else '?', query)
            if not following:
                break
            if following in pages:
                raise connection.BadAnswer(
                    reason='Redfish service %s: the pages of collection '
                           '%s lead back to %s' % (conn.address, path,
                                                   following))
            if len(pages) >= MAX_PAGES:
                raise exception.DriverError(
                    reason='Redfish service %s: collection %s has more '
                           'than %d pages' % (conn.address, path,
                                              MAX_PAGES))
            pages.append(following)
            page = following
        if count is not None and count > len(uris):
            LOG.warning('Redfish service %(addr)s: collection %(path)s '
                        'counts %(count)d members but lists %(found)d',
                        {'addr': conn.address, 'path': path,
                         'count': count, 'found': len(uris)})
        return uris

    def _service_path(self, conn, name):
        root = conn.service_root()
        link = root.get(name) if isinstance(root, dict) else None
        if not isinstance(link, dict) or not isinstance(
                link.get('@odata.id'), str):
            raise exception.DriverError(
                reason='Redfish service %s has no %s' % (conn.address,
                                                         name))
        return link['@odata.id']

    def _zones(self, conn):
        service = self._service_path(conn, 'CompositionService')
        body = conn.get(service).body
        link = body.get('ResourceZones') if isinstance(body, dict) else None
        if not isinstance(link, dict) or '@odata.id' not in link:
            return []
        zones = []
        for uri in self._collection(conn, link['@odata.id'],
                                    expand=True):
            try:
                zones.append(conn.read_member(uri, models.ResourceZone)[0])
            except LOCAL_ERRORS as exc:
                # The blocks of that zone show fewer reachable hosts
                # this round; binds check the zones again.
                LOG.warning('Redfish service %(addr)s: resource zone '
                            '%(zone)s skipped: %(reason)s',
                            {'addr': conn.address, 'zone': uri,
                             'reason': _reason(exc)})
        return zones

    def _block_zones(self, block, zones):
        found = set(block.zones)
        found.update(z.uri for z in zones if block.uri in z.blocks)
        return found

    def _system_zones(self, conn, system, zones):
        """The zones of the system's own (Compute or ComputerSystem)
        blocks; of all its blocks if it shows none of its own."""
        own, every = set(), set()
        for uri in system.blocks:
            found = set(z.uri for z in zones if uri in z.blocks)
            try:
                block, _ = conn.read(uri, models.ResourceBlock)
            except LOCAL_ERRORS:
                every.update(found)
                continue
            found.update(block.zones)
            every.update(found)
            if set(block.types) & models.SYSTEM_BLOCK_TYPES:
                own.update(found)
        return own or every

    def _resolve(self, conn, info, systems, unreadable, host_name):
        """The one system ``system_map`` gives ``host_name``: by
        @odata.id, UUID or a name (Name or HostName) no other system
        has. Raises Invalid naming what is wrong."""
        ref = info['system_map'][host_name]
        what = ('driver_info system_map maps host %s to %s' %
                (host_name, ref))
        if ref.startswith('/'):
            found = [s for s in systems if s.uri == ref.rstrip('/')]
            if not found and ref.rstrip('/') in unreadable:
                raise exception.DriverError(
                    reason='%s, which could not be read: %s' %
                    (what, unreadable[ref.rstrip('/')]))
        elif _UUID.match(ref):
            found = [s for s in systems if s.uuid == ref.lower()]
        else:
            found = [s for s in systems if s.answers_to(ref)]
        if len(found) > 1:
            raise exception.Invalid(
                reason='%s, which names several systems of the Redfish '
                       'service %s: %s; map the host to one @odata.id or '
                       'UUID' % (what, conn.address,
                                 ', '.join(_describe(s) for s in found)))
        if not found:
            if unreadable:
                raise exception.DriverError(
                    reason='%s, which is not among the systems that could '
                           'be read (%s could not be)' %
                           (what, ', '.join(sorted(unreadable))))
            raise exception.Invalid(
                reason='%s, which the Redfish service %s does not have; '
                       'its systems are %s' %
                       (what, conn.address,
                        ', '.join(_describe(s) for s in systems) or
                        'none'))
        return found[0]

    def _system(self, conn, info, fabric, host):
        """(system, ETag) of ``host``: the system ``system_map`` names,
        else the one system whose UUID (``match_by=uuid``) or unique
        HostName or Name is the host's; two candidates are an error
        naming both, never a guess."""
        name = (host or {}).get('name')
        systems, unreadable = self._systems(conn)
        if name in info['system_map']:
            try:
                system = self._resolve(conn, info, systems, unreadable,
                                       name)
            except exception.Invalid as exc:
                raise exception.DriverError(reason=exc.message)
            return conn.read(system.uri, models.System)
        reported = dmi_uuid(host)
        if reported:
            found = [s for s in systems if s.uuid == reported]
            if len(found) > 1:
                raise exception.DriverError(
                    reason='host %s reports the DMI UUID %s, which several '
                           'systems of Redfish fabric %s have: %s; map the '
                           'host to one @odata.id in driver_info '
                           'system_map' %
                           (name, reported, fabric.get('name'),
                            ', '.join(_describe(s) for s in found)))
            if found:
                return conn.read(found[0].uri, models.System)
        if info['match_by'] == 'uuid':
            wanted = str((host or {}).get('uuid') or '').lower()
            found = [s for s in systems if wanted and s.uuid == wanted]
            how = 'UUID %s' % wanted
        else:
            wanted = str(name or '').lower()
            found = [s for s in systems if s.answers_to(wanted)]
            how = 'name'
        if len(found) > 1:
            raise exception.DriverError(
                reason='host %s matches several systems of Redfish fabric '
                       '%s by %s: %s; map it to one @odata.id or UUID in '
                       'driver_info system_map' %
                       (name, fabric.get('name'), how,
                        ', '.join(_describe(s) for s in found)))
        if found and info['match_by'] != 'uuid':
            known = _identities(systems).get(found[0].uri)
            if known != wanted:
                raise exception.DriverError(
                    reason='host %s matches system %s of Redfish fabric %s '
                           'only by a name another system shares; the '
                           'system is reported as %s. Map the host to its '
                           '@odata.id or UUID in driver_info system_map' %
                           (name, _describe(found[0]), fabric.get('name'),
                            known or found[0].uri))
        if not found or unreadable:
            raise exception.DriverError(
                reason='no system on Redfish fabric %s matches host %s by '
                       '%s%s; set the host\'s system in driver_info '
                       'system_map' %
                       (fabric.get('name'), name, info['match_by'],
                        ' (systems %s could not be read)' %
                        ', '.join(sorted(unreadable)) if unreadable
                        else ''))
        return conn.read(found[0].uri, models.System)

    def _host_names(self, conn, info, systems, unreadable, hosts=()):
        """system URI -> the host name the conductor knows it by: the
        host system_map maps to it, else the host whose reported DMI
        UUID only it has, else its unique HostName or Name (the identity
        a bind matches by), else its @odata.id."""
        names = {}
        by_uuid = {}
        for system in systems:
            if system.uuid:
                by_uuid.setdefault(system.uuid, []).append(system)
        for host in hosts or ():
            found = by_uuid.get(dmi_uuid(host) or '', [])
            if len(found) == 1 and host.get('name') not in info[
                    'system_map']:
                names[found[0].uri] = host['name']
        for host in info['system_map']:
            try:
                system = self._resolve(conn, info, systems, unreadable,
                                       host)
            except (exception.Invalid, exception.DriverError) as exc:
                LOG.warning('Redfish service %(addr)s: %(reason)s',
                            {'addr': conn.address, 'reason': _reason(exc)})
                continue
            names[system.uri] = host
        identities = _identities(systems)
        shared = [s for s in systems
                  if s.uri not in names and not identities.get(s.uri)]
        if shared:
            LOG.warning('Redfish service %(addr)s: systems %(systems)s '
                        'share their names with other systems; a host is '
                        'matched to them only through driver_info '
                        'system_map', {'addr': conn.address,
                                       'systems': ', '.join(
                                           _describe(s) for s in shared)})
        return {s.uri: names.get(s.uri) or identities.get(s.uri) or s.uri
                for s in systems}

    def _device(self, conn, block):
        """What the block's members say of its device (models.Device).

        Raises LOCAL_ERRORS or models.ParseError when a member cannot be
        read: the block is then unknown, not guessed."""
        return self._members_device(
            conn, list(getattr(block, 'members', None) or
                       [(None, uri) for uri in block.member_uris]),
            block.health)

    def _members_device(self, conn, queue, health, device=None):
        """What resources ``queue`` ((type hint, URI) pairs) and what
        they lead to say of one device."""
        device = device or models.Device()
        device.health = health
        seen = set()
        while queue and len(seen) < MEMBER_LIMIT:
            hint, uri = queue.pop(0)
            if uri in seen:
                continue
            seen.add(uri)
            device.read_member(conn.get(uri).body, hint)
            queue += device.more
            device.more = []
        for uri in device.adapter_uris:
            device.read_adapter(conn.get(uri).body)
        functions = list(device.function_uris)
        collections = list(device.function_collections)
        for uri in device.device_uris:
            collection = device.read_pcie_device(conn.get(uri).body)
            if collection:
                collections.append(('PCIeFunction', collection))
        for rtype, collection in collections:
            if functions:
                break
            for uri in self._collection(conn, collection)[:1]:
                if rtype == 'PCIeFunction':
                    functions.append(uri)
                else:
                    # A NetworkDeviceFunction: its PCIe function.
                    device.read_member(conn.get(uri).body, rtype)
                    functions += device.function_uris
        for uri in functions[:1]:
            device.read_pcie_function(conn.get(uri).body)
        if device.wants_assembly:
            self._read_assembly(conn, device)
        return device

    @staticmethod
    def _read_assembly(conn, device):
        """The model and serial from the first Assembly the device's
        resources link, where they do not say them themselves. One that
        cannot be read leaves them unknown: the device is still what its
        resources say it is."""
        uri = device.assembly_uris[0]
        try:
            device.read_assembly(conn.get(uri).body)
        except (LOCAL_ERRORS + (models.ParseError,)) as exc:
            LOG.warning('Redfish service %(addr)s: assembly %(uri)s could '
                        'not be read; the device\'s model or serial stays '
                        'unknown: %(reason)s',
                        {'addr': conn.address, 'uri': uri,
                         'reason': _reason(exc)})

    def _bindable(self, conn, block):
        """The block's device; DriverError when no host can be given
        it (before anything is composed)."""
        try:
            device = self._device(conn, block) if block.is_device else None
        except models.ParseError as exc:
            raise exception.DriverError(
                reason='Redfish service %s: a member of resource block %s '
                       'is not what it should be: %s' %
                       (conn.address, block.uri, exc))
        if device is None or device.not_poolable:
            raise exception.DriverError(
                reason='resource block %s cannot be given to a host: %s' %
                (block.uri, device.not_poolable if device else
                 'it is a system\'s own block'))
        return device

    # -------------------------------------------------------- actions

    def _action(self, conn, info, system, action, block_uri, deadline):
        """POST ``action`` with If-Match, again with the fresh ETag after
        a 412; follows a task monitor."""
        offered = getattr(system, 'offered', None)
        if offered and action not in system.targets:
            # A system of a service that composes new systems
            # (POST /redfish/v1/Systems) rather than growing them.
            raise exception.DriverError(
                reason='system %s of Redfish service %s is not '
                       'expandable: it offers only %s, not %s' %
                       (system.uri, conn.address, ', '.join(offered),
                        action))
        path = system.target(action)
        body = {'ResourceBlock': {'@odata.id': block_uri}}
        response = self._with_etag(
            conn, system.uri,
            lambda headers: conn.post(path, body, headers=headers),
            '%s of %s' % (action, block_uri))
        if response.status == 202:
            self._follow_task(conn, info, response, path, deadline)

    def _follow_task(self, conn, info, response, path, deadline):
        monitor = response.headers.get('Location')
        if not monitor:
            raise exception.DriverError(
                reason='Redfish service %s accepted %s (202) without a '
                       'task monitor' % (conn.address, path))
        while True:
            if time.monotonic() > deadline:
                raise exception.DriverError(
                    reason='Redfish service %s: the task of %s did not '
                           'finish within %ss' % (conn.address, path,
                                                  info['timeout']))
            time.sleep(info['poll_interval'])
            answer = conn.get(monitor)
            if answer.status != 202:
                return answer

    def _wait(self, conn, info, block_uri, wanted, deadline):
        while True:
            block, _ = conn.read(block_uri, models.ResourceBlock)
            if block.state in wanted:
                return block
            if block.state == models.FAILED:
                detail = '; '.join(block.messages) or 'no reason given'
                raise exception.DriverError(
                    reason='Redfish fabric %s: resource block %s failed '
                           'to compose: %s' % (conn.address, block_uri,
                                               detail))
            if time.monotonic() > deadline:
                raise exception.DriverError(
                    reason='Redfish fabric %s: resource block %s is still '
                           '%s after %ss (waited for %s)' %
                           (conn.address, block_uri, block.state,
                            info['timeout'], ' or '.join(wanted)))
            time.sleep(info['poll_interval'])

    # -------------------------------------------- composition modes

    def _system_composition(self, conn):
        """What the Systems collection says of composing systems by POST
        (models.SystemComposition), with its capabilities object read."""
        path = self._service_path(conn, 'Systems')
        found, _ = conn.read(path, models.SystemComposition)
        if found.capabilities_uri:
            try:
                found.read_capabilities(
                    conn.get(found.capabilities_uri).body)
            except (LOCAL_ERRORS + (models.ParseError,)) as exc:
                # Then composed systems are not changed in place: they
                # are composed again.
                LOG.warning('Redfish service %(addr)s: the composition '
                            'capabilities %(uri)s could not be read: '
                            '%(reason)s', {'addr': conn.address,
                                           'uri': found.capabilities_uri,
                                           'reason': _reason(exc)})
        found.path = path
        return found

    def _mode(self, conn, info, system):
        """('expandable' or 'specific', SystemComposition or None): how
        a block joins ``system``, as driver_info composition_mode forces
        it or as the service offers it. DriverError when it offers
        neither, saying what is missing."""
        forced = info['composition_mode']
        if forced == 'expandable':
            return 'expandable', None
        if forced == 'auto' and system.expandable:
            return 'expandable', None
        composition = self._system_composition(conn)
        if forced == 'specific':
            return 'specific', composition
        # Only a system the service composed can be composed again: a
        # Physical one is a server as it is.
        composed = system.system_type in (None, 'Composed')
        if composition.offered and composed:
            return 'specific', composition
        if not system.offered and not composition.constrained:
            # It advertises no actions at all: the standard action
            # targets are tried, as before.
            return 'expandable', None
        offers = ('it offers only %s' % ', '.join(system.offered)
                  if system.offered else 'it advertises no actions')
        if composition.offered:
            why = ('and it is a %s system, not one the service composed '
                   '(SystemType Composed), so it cannot be composed again '
                   'either' % system.system_type)
        elif composition.constrained:
            why = ('and the service composes systems only from a '
                   'description (%s), picking the blocks itself, so a '
                   'given device cannot be composed into a given host' %
                   models.CONSTRAINED_USE_CASE)
        else:
            why = ('and the service does not compose systems either (its '
                   'Systems collection has no %s capability)' %
                   models.COMPOSITION_USE_CASE)
        raise exception.DriverError(
            reason='system %s of Redfish service %s is not expandable: %s; '
                   '%s' % (system.uri, conn.address, offers, why))

    def describe_service(self, fabric):
        """What the service offers for composition: the modes its
        systems and its Systems collection show, and the
        CompositionService's AllowOverprovisioning and
        ReservationSupported (None where it does not say)."""
        info = self._info(fabric)
        with self._connect(info) as conn:
            if self._zones_mode(conn, info):
                return self._describe_fabrics(conn, info)
            systems, unreadable = self._systems(conn)
            composition = self._system_composition(conn)
            service = conn.get(self._service_path(
                conn, 'CompositionService')).body
            service = service if isinstance(service, dict) else {}
            return {
                'mode': 'resource_blocks',
                'expandable_systems': sorted(
                    s.uri for s in systems if s.expandable),
                'other_systems': {
                    s.uri: s.offered for s in systems if not s.expandable},
                'unreadable_systems': unreadable,
                'specific': composition.offered,
                'constrained': composition.constrained,
                'capabilities': composition.capabilities_uri,
                'updatable_after_create': composition.updatable,
                'allow_overprovisioning': service.get(
                    'AllowOverprovisioning'),
                'reservation_supported': service.get(
                    'ReservationSupported'),
            }

    def _describe_fabrics(self, conn, info):
        """describe_service of a fabric manager (zones mode): its
        fabrics, and of the one the driver works with the number of
        endpoints (initiators among them), zones and connections, what
        could not be read, and how a bind gives each host with an
        initiator a device: ``zone action`` (Zone.AddEndpoint on the
        host's zone), ``PATCH`` (of the zone's Links.Endpoints),
        ``connection`` (POST of a Connection) or ``new zone`` (POST of a
        zone of the host's initiator and the device)."""
        fabrics = []
        for uri in self._collection(conn, self._service_path(conn,
                                                             'Fabrics')):
            try:
                found = conn.read(uri, models.Fabric)[0]
            except LOCAL_ERRORS as exc:
                fabrics.append({'uri': uri.rstrip('/'), 'error':
                                _reason(exc)})
                continue
            fabrics.append({'id': found.id, 'uri': found.uri,
                            'name': found.name, 'type': found.fabric_type,
                            'zoned': found.zoned,
                            'connections': bool(found.connections)})
        zoning = self._zoning(conn, info)
        binds = {}
        for system in sorted(zoning.bindable_systems()):
            own = zoning.own_zones(system)
            if own and any('Zone.AddEndpoint' in z.targets for z in own):
                binds[system] = 'zone action'
            elif own:
                binds[system] = 'PATCH'
            elif zoning.fabric.connections:
                binds[system] = 'connection'
            else:
                binds[system] = 'new zone'
        return {
            'mode': 'zones',
            'fabrics': fabrics,
            'fabric': {'id': zoning.fabric.id, 'uri': zoning.fabric.uri,
                       'name': zoning.fabric.name,
                       'type': zoning.fabric.fabric_type},
            'endpoints': len(zoning.listed),
            'initiators': sum(1 for uri in zoning.listed
                              if zoning.is_initiator(uri)),
            'zones': len(zoning.zones),
            'connections': (len(zoning.connections)
                            if zoning.fabric.connections else None),
            'unreadable': dict(zoning.unreadable),
            'says_reach': zoning.says_reach(),
            'binds': binds,
        }

    def _task_answer(self, conn, info, response, path, deadline):
        """The final answer of a request: itself, or what its task
        monitor answers once the task ends (202)."""
        if response.status == 202:
            return self._follow_task(conn, info, response, path, deadline)
        return response

    def _with_etag(self, conn, system_uri, send, what):
        """``send(headers)`` with If-Match of the system's current ETag,
        again with the fresh one after a 412."""
        return self._etag_retry(conn, system_uri, models.System,
                                lambda current, headers: send(headers),
                                what)

    def _etag_retry(self, conn, uri, model, send, what):
        """``send(current, headers)``: ``current`` the resource at
        ``uri`` as ``model`` reads it now, ``headers`` If-Match of its
        ETag. After a 412 (someone changed it meanwhile) it is read and
        sent again, a bounded number of times."""
        for attempt in range(PRECONDITION_RETRIES + 1):
            current, etag = conn.read(uri, model)
            headers = {'If-Match': etag} if etag else {}
            try:
                return send(current, headers)
            except connection.HTTPFailure as exc:
                if exc.status != 412:
                    raise
                if attempt == PRECONDITION_RETRIES:
                    raise connection.HTTPFailure(
                        412, exc.messages,
                        reason='Redfish service %s refused %s on %s with '
                               'HTTP 412 %d times: %s changes under every '
                               'try; try again later' %
                        (conn.address, what, uri, attempt + 1, uri))
                LOG.info('%(what)s on %(uri)s met a change (412); trying '
                         'again with the new ETag', {'what': what,
                                                     'uri': uri})

    def _compose(self, conn, info, composition, system, blocks, deadline):
        """Make ``blocks`` the resource blocks of the host's ``system``
        (specific composition); returns the URI of the host's system
        afterwards.

        Where the service lets a composed system's blocks change
        (``ResourceBlocks@Redfish.UpdatableAfterCreate``) the system is
        patched and keeps its identity. Otherwise it is decomposed
        (DELETE) and composed again with the blocks (POST to the Systems
        collection) under its Name and HostName; if the service refuses
        that POST, the system is composed again with the blocks it had,
        so the host is not left without one. (A POST that may still be
        done, one not answered in time, is not followed by another.) A
        DELETE whose outcome is unknown (its task did not end in time) is
        followed by :meth:`_after_unfinished_delete`: the blocks are not
        composed, and the host keeps a system."""
        body = {'Links': {'ResourceBlocks': [{'@odata.id': uri}
                                             for uri in blocks]}}
        if composition.updatable:
            response = self._with_etag(
                conn, system.uri,
                lambda headers: conn.patch(system.uri, body,
                                           headers=headers),
                'PATCH of Links.ResourceBlocks')
            self._task_answer(conn, info, response, system.uri, deadline)
            return system.uri
        try:
            response = self._with_etag(
                conn, system.uri,
                lambda headers: conn.delete(system.uri, headers=headers),
                'DELETE')
            self._task_answer(conn, info, response, system.uri, deadline)
        except connection.HTTPFailure:
            # Refused: the system is as it was.
            raise
        except exception.DriverError as exc:
            # Not known to be done or not: its task did not end in time,
            # or the answer never came or made no sense.
            self._after_unfinished_delete(conn, info, composition, system,
                                          blocks, exc)
        try:
            return self._post_system(conn, info, composition, system,
                                     body, deadline)
        except connection.HTTPFailure as exc:
            LOG.error('Redfish service %(addr)s: composing system '
                      '%(name)s again with %(blocks)s failed (%(reason)s); '
                      'composing it with the blocks it had',
                      {'addr': conn.address, 'name': system.name,
                       'blocks': ', '.join(blocks), 'reason': _reason(exc)})
            restore = {'Links': {'ResourceBlocks': [
                {'@odata.id': uri} for uri in system.blocks]}}
            try:
                self._post_system(conn, info, composition, system, restore,
                                  time.monotonic() + float(info['timeout']))
            except exception.DriverError as again:
                raise exception.DriverError(
                    reason='%s; and composing system %s again with the '
                           'blocks it had failed too: %s; the host has no '
                           'system on the service now' %
                           (_reason(exc), system.name or system.uri,
                            _reason(again)))
            raise

    def _system_after_delete(self, conn, system):
        """'there' (the system is still listed), 'back' (another system
        holds one of its blocks: the service composed it again itself) or
        'gone'."""
        systems, unreadable = self._systems(conn)
        if system.uri in unreadable or any(s.uri == system.uri
                                           for s in systems):
            return 'there'
        if any(set(s.blocks) & set(system.blocks) for s in systems):
            return 'back'
        if unreadable:
            raise exception.DriverError(
                reason='systems could not be read: %s' % '; '.join(
                    '%s: %s' % (uri, unreadable[uri])
                    for uri in sorted(unreadable)))
        return 'gone'

    def _after_unfinished_delete(self, conn, info, composition, system,
                                 blocks, exc):
        """A DELETE of the host's system (to compose it again with
        ``blocks``) whose outcome is unknown: watch the Systems collection
        for up to the fabric's ``timeout`` until the system is gone (then
        compose it again with the blocks it had, so the host keeps a
        system) or is back; always raises DriverError saying what became
        of the system. The blocks are never composed in its place: the
        DELETE may still be under way."""
        name = system.name or system.host_name or system.uri
        what = ('Redfish service %s: the DELETE of system %s (to compose '
                'it again with %s) did not finish: %s' %
                (conn.address, system.uri, ', '.join(blocks) or 'no blocks',
                 _reason(exc)))
        LOG.warning('%(what)s; watching the systems until it is gone or '
                    'back', {'what': what})
        limit = time.monotonic() + float(info['timeout'])
        state, why = None, None
        while True:
            try:
                state = self._system_after_delete(conn, system)
                why = None
            except exception.DriverError as again:
                state, why = None, _reason(again)
            if state in ('gone', 'back') or time.monotonic() > limit:
                break
            time.sleep(info['poll_interval'])
        if state == 'back':
            raise exception.DriverError(
                reason='%s; the service composed system %s again itself, '
                       'with the blocks it had; nothing was changed' %
                       (what, name))
        if state == 'there':
            raise exception.DriverError(
                reason='%s; system %s is still there as it was after %ss '
                       '(its DELETE may still be under way); nothing else '
                       'was asked of the service' %
                       (what, system.uri, info['timeout']))
        if state is None:
            raise exception.DriverError(
                reason='%s; what became of system %s could not be told '
                       '(%s); check the host\'s system on the service' %
                       (what, system.uri, why))
        restore = {'Links': {'ResourceBlocks': [
            {'@odata.id': uri} for uri in system.blocks]}}
        try:
            uri = self._post_system(conn, info, composition, system,
                                    restore,
                                    time.monotonic() + float(info['timeout']))
        except exception.DriverError as failed:
            raise exception.DriverError(
                reason='%s; system %s was gone, and composing it again with '
                       'the blocks it had failed: %s; the host has no '
                       'system on the service now' %
                       (what, name, _reason(failed)))
        raise exception.DriverError(
            reason='%s; system %s was gone, so it was composed again with '
                   'the blocks it had (%s): the change was not made' %
                   (what, name, uri))

    def _post_system(self, conn, info, composition, system, body, deadline):
        body = dict(body)
        body['Name'] = (system.name or system.host_name or
                        system.uri.rsplit('/', 1)[-1])
        if system.host_name:
            body['HostName'] = system.host_name
        response = conn.post(composition.path, body)
        answer = self._task_answer(conn, info, response, composition.path,
                                   deadline)
        location = answer.headers.get('Location')
        if not location and isinstance(answer.body, dict):
            location = answer.body.get('@odata.id')
        if not isinstance(location, str) or not location:
            raise exception.DriverError(
                reason='Redfish service %s composed a system (POST %s) '
                       'without saying where it is (no Location)' %
                       (conn.address, composition.path))
        if '://' in location:
            location = '/' + location.split('://', 1)[1].partition('/')[2]
        LOG.info('Redfish service %(addr)s composed system %(uri)s from '
                 '%(blocks)s', {'addr': conn.address, 'uri': location,
                                'blocks': ', '.join(
                                    link['@odata.id'] for link in
                                    body['Links']['ResourceBlocks'])})
        return location.rstrip('/')

    # -------------------------------------------------- the interface

    def _operation(self, fabric, device):
        """(settings, deadline, block URI) of a bind or unbind.

        The deadline is the fabric's ``timeout``, but never later than
        the conductor's ``[fabric]operation_timeout`` (less a margin for
        the answer): past that the conductor stops waiting and undoes the
        bind, so the driver must have given up by then."""
        info = self._info(fabric)
        limit = min(float(info['timeout']),
                    max(1.0, CONF.fabric.operation_timeout -
                        OPERATION_MARGIN))
        return (info, time.monotonic() + limit,
                str(device.get('address') or '').rstrip('/'))

    def bind_device(self, fabric, device, host):
        info, deadline, block_uri = self._operation(fabric, device)
        # Debug-level marks of the bind's phases (tools/bench/
        # device_bind.py reads them); nothing at the default level.
        LOG.debug('Composing resource block %(block)s for host %(host)s',
                  {'block': block_uri, 'host': host.get('name')})
        with contextlib.ExitStack() as held:
            held.enter_context(one_operation(info['address'], block_uri))
            conn = held.enter_context(self._connect(info))
            if self._zones_mode(conn, info):
                return self._zones_bind(conn, info, fabric, block_uri,
                                        host, deadline)
            return self._bind(conn, info, fabric, block_uri, host,
                              deadline, held)

    def _host_system(self, conn, info, fabric, host, held):
        """(system, mode, SystemComposition) of the host. In specific
        mode one operation at a time composes the host's system (each
        composes it anew), and the system is read once that is so."""
        system, _ = self._system(conn, info, fabric, host)
        mode, composition = self._mode(conn, info, system)
        if mode == 'specific':
            ref = info['system_map'].get(host.get('name')) or ''
            if ref.startswith('/') and not composition.updatable:
                # Composed again, the system gets a new @odata.id: the
                # host would lose its system after the first bind.
                raise exception.DriverError(
                    reason='host %s is mapped to system %s by its '
                           '@odata.id, but the Redfish service %s composes '
                           'a system again to change its blocks, under a '
                           'new @odata.id; map the host by the system\'s '
                           'UUID or unique name in driver_info system_map' %
                           (host.get('name'), ref, conn.address))
            held.enter_context(one_operation(
                info['address'], 'system of host %s' % host.get('name')))
            system, _ = self._system(conn, info, fabric, host)
        return system, mode, composition

    def _bind(self, conn, info, fabric, block_uri, host, deadline, held):
        block, _ = conn.read(block_uri, models.ResourceBlock)
        system, mode, composition = self._host_system(
            conn, info, fabric, host, held)
        composed = (models.COMPOSED, models.COMPOSED_AND_AVAILABLE)
        device = self._bindable(conn, block)
        if block.uri in system.blocks or system.uri in block.systems:
            LOG.info('Resource block %(block)s is already in system '
                     '%(system)s', {'block': block.uri,
                                    'system': system.uri})
        elif block.systems:
            raise exception.DriverError(
                reason='resource block %s is composed into system %s, '
                       'not %s (host %s)' %
                       (block.uri, ', '.join(block.systems), system.uri,
                        host.get('name')))
        else:
            # A composition under way (a removal not finished) is
            # waited for below.
            why = (None if block.state == models.COMPOSING
                   else block.unavailable)
            if why:
                raise exception.DriverError(
                    reason='resource block %s cannot be composed now: '
                           '%s' % (block.uri, why))
            zones = self._zones(conn)
            block_zones = self._block_zones(block, zones)
            # A service with no resource zones at all says nothing of
            # what connects to what: any system may try.
            if (zones or block_zones) and not (
                    block_zones & self._system_zones(conn, system, zones)):
                raise exception.DriverError(
                    reason='resource block %s shares no resource zone '
                           'with system %s (host %s): the fabric cannot '
                           'connect them' % (block.uri, system.uri,
                                             host.get('name')))
            if block.state != models.UNUSED:
                # A removal may still be under way.
                block = self._wait(conn, info, block.uri,
                                   (models.UNUSED,), deadline)
            if mode == 'specific':
                try:
                    uri = self._compose(conn, info, composition, system,
                                        system.blocks + [block.uri],
                                        deadline)
                except connection.HTTPFailure:
                    # A repeated request may have been done already.
                    again, _ = conn.read(block.uri,
                                         models.ResourceBlock)
                    if not again.systems:
                        raise
                    uri = again.systems[0]
                system, _ = conn.read(uri, models.System)
            else:
                LOG.debug('Resource block %(block)s: %(action)s on system '
                          '%(system)s', {'block': block.uri,
                                         'action': models.System.ADD,
                                         'system': system.uri})
                try:
                    self._action(conn, info, system, models.System.ADD,
                                 block.uri, deadline)
                    LOG.debug('Resource block %(block)s: %(action)s '
                              'answered', {'block': block.uri,
                                           'action': models.System.ADD})
                except connection.HTTPFailure:
                    # A repeated request may have been done already.
                    again, _ = conn.read(block.uri,
                                         models.ResourceBlock)
                    if system.uri not in again.systems:
                        raise
        block = self._wait(conn, info, block.uri, composed, deadline)
        LOG.info('Resource block %(block)s composed into system '
                 '%(system)s for host %(host)s (device %(vendor)s:%(product)s '
                 'serial %(serial)s)',
                 {'block': block.uri, 'system': system.uri,
                  'host': host.get('name'), 'vendor': device.vendor_id,
                  'product': device.product_id,
                  'serial': device.serial or 'unknown'})
        return locator_mod.Locator(vendor_id=device.vendor_id,
                                   product_id=device.product_id,
                                   serial=device.serial,
                                   fabric_ref=block.uri)

    def unbind_device(self, fabric, device, host):
        info, deadline, block_uri = self._operation(fabric, device)
        with contextlib.ExitStack() as held:
            held.enter_context(one_operation(info['address'], block_uri))
            conn = held.enter_context(self._connect(info))
            if self._zones_mode(conn, info):
                return self._zones_unbind(conn, info, fabric, block_uri,
                                          host, deadline)
            self._unbind(conn, info, fabric, block_uri, host, deadline,
                         held)

    def _unbind(self, conn, info, fabric, block_uri, host, deadline, held):
        block, _ = conn.read(block_uri, models.ResourceBlock)
        mode = composition = None
        if host is not None:
            try:
                system, mode, composition = self._host_system(
                    conn, info, fabric, host, held)
            except exception.DriverError:
                if block.systems or block.state not in (models.UNUSED,
                                                        models.FAILED):
                    raise
                # Nothing holds the block: there is nothing to undo,
                # whatever became of the host's system.
                LOG.warning('Resource block %(block)s is in no system; '
                            'the system of host %(host)s is not found '
                            'either', {'block': block.uri,
                                       'host': host.get('name')})
                return
            block, _ = conn.read(block_uri, models.ResourceBlock)
            systems = [system] if (system.uri in block.systems
                                   or block.uri in system.blocks) else []
        else:
            systems = [conn.read(uri, models.System)[0]
                       for uri in block.systems]
        if not systems:
            if block.state in (models.COMPOSING, models.COMPOSED) and \
                    not block.systems:
                self._wait(conn, info, block.uri, (models.UNUSED,),
                           deadline)
            return
        for system in systems:
            if mode is None:
                mode, composition = self._mode(conn, info, system)
            try:
                if mode == 'specific':
                    self._compose(conn, info, composition, system,
                                  [uri for uri in system.blocks
                                   if uri != block.uri], deadline)
                else:
                    self._action(conn, info, system,
                                 models.System.REMOVE, block.uri,
                                 deadline)
            except connection.HTTPFailure:
                again, _ = conn.read(block.uri, models.ResourceBlock)
                if system.uri in again.systems:
                    raise
        self._wait(conn, info, block.uri,
                   (models.UNUSED, models.FAILED), deadline)
        LOG.info('Resource block %(block)s removed from %(systems)s',
                 {'block': block.uri,
                  'systems': ', '.join(s.uri for s in systems)})

    def _reservations(self, conn, service):
        """block URI -> the CompositionReservation that holds it."""
        link = service.get('CompositionReservations') if isinstance(
            service, dict) else None
        if not isinstance(link, dict) or '@odata.id' not in link:
            return {}
        found = {}
        try:
            uris = self._collection(conn, link['@odata.id'])
        except LOCAL_ERRORS as exc:
            LOG.warning('Redfish service %(addr)s: composition '
                        'reservations could not be read: %(reason)s',
                        {'addr': conn.address, 'reason': _reason(exc)})
            return {}
        for uri in uris:
            try:
                body = conn.get(uri).body
                blocks = models.reserved_blocks(body)
            except (LOCAL_ERRORS + (models.ParseError,)) as exc:
                LOG.warning('Redfish service %(addr)s: composition '
                            'reservation %(uri)s could not be read: '
                            '%(reason)s', {'addr': conn.address, 'uri': uri,
                                           'reason': _reason(exc)})
                continue
            for block in blocks:
                found[block] = uri.rstrip('/')
        return found

    @staticmethod
    def _unavailable(block, device, reserved):
        """Why the device must stay out of service, or None."""
        why = block.unavailable
        if why:
            return why
        if block.uri in reserved:
            return ('composition reservation %s holds it' %
                    reserved[block.uri])
        if block.state in (models.COMPOSED, models.COMPOSED_AND_AVAILABLE) \
                and not block.systems:
            return ('it is %s, into a system the service does not name' %
                    block.state)
        if device.health == base.HEALTH_WARNING:
            return 'the service reports its health as Warning'
        return None

    def _systems(self, conn):
        """(systems read, {URI: reason} of those that could not be)."""
        systems, unreadable = [], {}
        path = self._service_path(conn, 'Systems')
        for uri in self._collection(conn, path, expand=True):
            try:
                systems.append(conn.read_member(uri, models.System)[0])
            except LOCAL_ERRORS as exc:
                unreadable[uri.rstrip('/')] = _reason(exc)
                LOG.warning('Redfish service %(addr)s: system %(system)s '
                            'could not be read; its host is unknown this '
                            'round: %(reason)s',
                            {'addr': conn.address, 'system': uri,
                             'reason': _reason(exc)})
        return systems, unreadable

    def discover(self, fabric):
        info = self._info(fabric)
        with self._connect(info) as conn:
            if self._zones_mode(conn, info):
                return self._zones_discover(conn, info, fabric)
            zones = self._zones(conn)
            systems, unreadable = self._systems(conn)
            names = self._host_names(conn, info, systems, unreadable,
                                     fabric.get('hosts'))
            system_zones = {s.uri: self._system_zones(conn, s, zones)
                            for s in systems}
            service = self._service_path(conn, 'CompositionService')
            body = conn.get(service).body
            link = (body or {}).get('ResourceBlocks') if isinstance(
                body, dict) else None
            if not isinstance(link, dict) or '@odata.id' not in link:
                raise exception.DriverError(
                    reason='Redfish service %s has no ResourceBlocks' %
                    conn.address)
            reserved = self._reservations(conn, body)
            found = []
            for uri in self._collection(conn, link['@odata.id'],
                                        expand=True):
                try:
                    block, _ = conn.read_member(uri, models.ResourceBlock)
                except LOCAL_ERRORS as exc:
                    found.append(_unknown(uri, _reason(exc)))
                    continue
                if not block.is_device:
                    continue
                try:
                    device = self._device(conn, block)
                except LOCAL_ERRORS as exc:
                    found.append(_unknown(block.uri, _reason(exc)))
                    continue
                except models.ParseError as exc:
                    found.append(_unknown(
                        block.uri, 'Redfish service %s: a member of '
                        'resource block %s is not what it should be: %s' %
                        (conn.address, block.uri, exc)))
                    continue
                held = block.systems
                lost = [s for s in held if s in unreadable]
                if lost:
                    found.append(_unknown(
                        block.uri, 'it is composed into system %s, which '
                        'could not be read: %s' % (lost[0],
                                                   unreadable[lost[0]])))
                    continue
                zones_of_block = self._block_zones(block, zones)
                bound = [names.get(s, s) for s in held]
                item = {
                    'address': block.uri,
                    'kind': device.kind or 'pci',
                    'model': device.model,
                    'vendor_id': device.vendor_id,
                    'product_id': device.product_id,
                    'serial': device.serial,
                    'health': device.health,
                    'state': block.state,
                    # The systems sharing a resource zone with the
                    # block; None (every host) where the service has no
                    # zones, so tells nothing of reachability.
                    'hosts': (sorted(names[s.uri] for s in systems
                                     if zones_of_block
                                     & system_zones[s.uri])
                              if zones or zones_of_block else None),
                    'bound_to': ', '.join(bound) if bound else None,
                    'holders': bound,
                }
                if device.not_poolable:
                    item['not_poolable'] = device.not_poolable
                why = self._unavailable(block, device, reserved)
                if why:
                    item['unavailable'] = why
                found.append(item)
            return found

    # ------------------------------------------------ fabric zones mode

    def _zones_mode(self, conn, info):
        """True when devices are given to hosts by zoning a fabric's
        endpoints: forced by composition_mode ``zones``, or (``auto``)
        where the service has no resource blocks to compose but has
        Fabrics."""
        forced = info['composition_mode']
        if forced != 'auto':
            return forced == 'zones'
        root = conn.root
        if isinstance(root.get('CompositionService'), dict):
            body = conn.get(self._service_path(conn,
                                               'CompositionService')).body
            if isinstance(body, dict) and isinstance(
                    body.get('ResourceBlocks'), dict):
                return False
        if isinstance(root.get('Fabrics'), dict):
            return True
        if isinstance(root.get('CompositionService'), dict):
            return False
        raise exception.DriverError(
            reason='Redfish service %s has no CompositionService (resource '
                   'blocks to compose) and no Fabrics (endpoints to zone): '
                   'nothing the redfish driver can give a host' %
                   conn.address)

    def _fabric(self, conn, info):
        """The fabric (models.Fabric) whose zones and endpoints the driver
        works with: the one driver_info fabric_id names, else the one
        fabric of the service that has Zones and Endpoints. Invalid
        naming fabric_id when that is what is wrong."""
        ref = info.get('fabric_id')
        if not isinstance(conn.root.get('Fabrics'), dict):
            if ref:
                raise exception.Invalid(
                    reason='driver_info fabric_id names fabric %s, but the '
                           'Redfish service %s has no Fabrics' %
                           (ref, conn.address))
            if info['composition_mode'] == 'zones':
                raise exception.Invalid(
                    reason='driver_info composition_mode is zones, but the '
                           'Redfish service %s has no Fabrics' %
                           conn.address)
            raise exception.DriverError(
                reason='Redfish service %s has no Fabrics' % conn.address)
        fabrics, unreadable = [], {}
        for uri in self._collection(conn, self._service_path(conn,
                                                             'Fabrics')):
            try:
                fabrics.append(conn.read(uri, models.Fabric)[0])
            except LOCAL_ERRORS as exc:
                unreadable[uri.rstrip('/')] = _reason(exc)
                LOG.warning('Redfish service %(addr)s: fabric %(uri)s could '
                            'not be read: %(reason)s',
                            {'addr': conn.address, 'uri': uri,
                             'reason': _reason(exc)})
        listed = ', '.join('%s (%s)' % (f.id, f.uri) for f in fabrics)
        if ref:
            found = [f for f in fabrics if f.answers_to(ref)]
            if not found:
                if unreadable:
                    raise exception.DriverError(
                        reason='driver_info fabric_id names fabric %s, '
                               'which is not among the fabrics of Redfish '
                               'service %s that could be read (%s could '
                               'not be)' % (ref, conn.address,
                                            ', '.join(sorted(unreadable))))
                raise exception.Invalid(
                    reason='driver_info fabric_id names fabric %s, which '
                           'the Redfish service %s does not have; its '
                           'fabrics are %s' % (ref, conn.address,
                                               listed or 'none'))
            if not found[0].zoned:
                raise exception.Invalid(
                    reason='driver_info fabric_id names fabric %s of '
                           'Redfish service %s, which has no Zones and '
                           'Endpoints to give devices to hosts with' %
                           (found[0].uri, conn.address))
            return found[0]
        zoned = [f for f in fabrics if f.zoned]
        if len(zoned) > 1:
            raise exception.Invalid(
                reason='Redfish service %s has several fabrics with zones '
                       'and endpoints (%s); name one in driver_info '
                       'fabric_id' % (conn.address, ', '.join(
                           '%s (%s)' % (f.id, f.uri) for f in zoned)))
        if not zoned:
            error = (exception.Invalid if info['composition_mode'] == 'zones'
                     and not unreadable else exception.DriverError)
            raise error(
                reason='Redfish service %s has no fabric with Zones and '
                       'Endpoints for composition_mode zones (its fabrics: '
                       '%s%s)' % (
                           conn.address, listed or 'none',
                           '; unreadable: %s' % ', '.join(sorted(
                               unreadable)) if unreadable else ''))
        return zoned[0]

    def _zoning(self, conn, info):
        """The fabric's endpoints, zones and connections as read now
        (zones.Zoning); one that cannot be read is noted, not fatal."""
        try:
            fabric = self._fabric(conn, info)
        except exception.Invalid as exc:
            raise exception.DriverError(reason=exc.message)
        zoning = fabric_zones.Zoning(fabric,
                                     self._service_path(conn, 'Systems'))
        kinds = [(fabric.endpoints, models.Endpoint),
                 (fabric.zones, models.FabricZone)]
        if fabric.connections:
            kinds.append((fabric.connections, models.FabricConnection))
        for path, model in kinds:
            for uri in self._collection(conn, path, expand=True):
                uri = uri.rstrip('/')
                if model is models.Endpoint:
                    zoning.listed.append(uri)
                try:
                    zoning.add(conn.read_member(uri, model)[0])
                except LOCAL_ERRORS as exc:
                    zoning.unreadable[uri] = _reason(exc)
                    LOG.warning('Redfish service %(addr)s: %(uri)s could '
                                'not be read this round: %(reason)s',
                                {'addr': conn.address, 'uri': uri,
                                 'reason': _reason(exc)})
        # Endpoints a zone or connection names that the collection does
        # not list (services do leave some out) are the fabric's all the
        # same: without them a host's zone would look like nobody's.
        prefix = fabric.endpoints.rstrip('/') + '/'
        named = set()
        for item in list(zoning.zones.values()) + list(
                zoning.connections.values()):
            named.update(getattr(item, 'endpoints', []))
            named.update(getattr(item, 'initiators', []))
            named.update(getattr(item, 'targets', []))
        for uri in sorted(named):
            if (not uri.startswith(prefix) or uri in zoning.endpoints
                    or uri in zoning.unreadable):
                continue
            LOG.warning('Redfish service %(addr)s: endpoint %(uri)s is in '
                        'a zone or connection but not in %(path)s',
                        {'addr': conn.address, 'uri': uri,
                         'path': fabric.endpoints})
            zoning.listed.append(uri)
            try:
                zoning.add(conn.read(uri, models.Endpoint)[0])
            except LOCAL_ERRORS as exc:
                zoning.unreadable[uri] = _reason(exc)
        return zoning.finish()

    def _endpoint_device(self, conn, endpoint):
        """What a target endpoint's connected entities say of the device
        (models.Device); raises LOCAL_ERRORS or models.ParseError when one
        cannot be read."""
        device = models.Device()
        queue = []
        targets = endpoint.targets()
        for entity in targets:
            what = '%s %s' % (entity.type or 'entity',
                              entity.link or 'of %s' % endpoint.uri)
            if entity.fabric_part:
                device.refuse(what, 'is part of the fabric itself, not a '
                                    'device a host can be given')
            elif entity.memory:
                device.refuse(what, 'is CXL memory; %s' %
                              models.CXL_MEMORY_REASON)
            elif entity.link:
                queue.append((_ENTITY_HINTS.get(entity.type), entity.link))
            elif entity.pci:
                # Only the ids: the endpoint is the device.
                device.bindable += 1
        if not targets:
            device.refuse('endpoint %s' % endpoint.uri,
                          'connects no target entity')
        device = self._members_device(conn, queue, endpoint.health, device)
        for ids in [e.pci for e in targets] + [endpoint.pci]:
            if ids:
                device.read_pci_ids(ids)
        return device

    def _zones_bind(self, conn, info, fabric, uri, host, deadline):
        zoning = self._zoning(conn, info)
        endpoint = self._target_endpoint(conn, zoning, uri)
        try:
            device = self._endpoint_device(conn, endpoint)
        except models.ParseError as exc:
            raise exception.DriverError(
                reason='Redfish service %s: what endpoint %s connects is '
                       'not what it should be: %s' % (conn.address, uri,
                                                      exc))
        if device.not_poolable:
            raise exception.DriverError(
                reason='endpoint %s cannot be given to a host: %s' %
                (uri, device.not_poolable))
        system, _ = self._system(conn, info, fabric, host)
        locator = locator_mod.Locator(vendor_id=device.vendor_id,
                                      product_id=device.product_id,
                                      serial=device.serial, fabric_ref=uri)
        holders = zoning.holders(uri)
        if system.uri in holders:
            LOG.info('Endpoint %(uri)s is given to system %(system)s '
                     'already', {'uri': uri, 'system': system.uri})
            return locator
        if holders:
            raise exception.DriverError(
                reason='endpoint %s is given to system %s, not %s (host '
                       '%s)' % (uri, ', '.join(holders), system.uri,
                                host.get('name')))
        why = self._endpoint_unavailable(endpoint, device)
        if why:
            raise exception.DriverError(
                reason='endpoint %s cannot be given to a host now: %s' %
                (uri, why))
        if system.uri not in zoning.reach(uri):
            raise exception.DriverError(
                reason='endpoint %s is in no zone that system %s (host %s) '
                       'can reach on fabric %s: the fabric cannot connect '
                       'them' % (uri, system.uri, host.get('name'),
                                 zoning.fabric.uri))
        zone = zoning.zone_for(system.uri, uri)
        if zone is not None:
            self._zone_change(conn, info, zone.uri, uri, True, deadline)
        elif zoning.fabric.connections:
            self._connect_endpoint(conn, info, zoning, system.uri, uri,
                                   deadline)
        else:
            self._create_zone(conn, info, zoning, system.uri, uri,
                              deadline)
        again = self._zoning(conn, info)
        if system.uri not in again.holders(uri):
            raise exception.DriverError(
                reason='Redfish service %s accepted giving endpoint %s to '
                       'system %s, but the fabric does not show it so' %
                       (conn.address, uri, system.uri))
        LOG.info('Endpoint %(uri)s of fabric %(fabric)s given to system '
                 '%(system)s for host %(host)s (device %(vendor)s:%(product)s '
                 'serial %(serial)s)',
                 {'uri': uri, 'fabric': zoning.fabric.uri,
                  'system': system.uri, 'host': host.get('name'),
                  'vendor': device.vendor_id, 'product': device.product_id,
                  'serial': device.serial or 'unknown'})
        return locator

    def _target_endpoint(self, conn, zoning, uri):
        """The endpoint read afresh; DriverError when it is not a target
        endpoint of the fabric."""
        prefix = zoning.fabric.endpoints.rstrip('/') + '/'
        if not uri.startswith(prefix):
            raise exception.DriverError(
                reason='device %s is not an endpoint of fabric %s; was it '
                       'found on another fabric or composition mode?' %
                       (uri, zoning.fabric.uri))
        endpoint, _ = conn.read(uri, models.Endpoint)
        if endpoint.initiator_systems(zoning.systems_path):
            raise exception.DriverError(
                reason='endpoint %s is an initiator of a host, not a '
                       'device' % uri)
        return endpoint

    @staticmethod
    def _endpoint_unavailable(endpoint, device):
        if endpoint.state and endpoint.state != 'Enabled':
            return 'its Status.State is %s' % endpoint.state
        if device.health == base.HEALTH_WARNING:
            return 'the service reports its health as Warning'
        return None

    def _zone_change(self, conn, info, zone_uri, uri, add, deadline):
        """Add ``uri`` to the zone or take it out: by the zone's
        Zone.AddEndpoint / Zone.RemoveEndpoint action where it offers it
        (DSP0268 makes Links.Endpoints read-only; the actions came with
        Zone v1_5_0), else by PATCH of its Links.Endpoints. If-Match (and
        the actions' ZoneETag and EndpointETag) carry the ETags read just
        before; after a 412 both are read and the change sent again.
        Follows a task monitor."""
        action = 'Zone.AddEndpoint' if add else 'Zone.RemoveEndpoint'

        def send(zone, headers):
            current = list(zone.endpoints)
            if (uri in current) == add:
                return None
            target = zone.targets.get(action)
            if target:
                body = {'Endpoint': {'@odata.id': uri}}
                if headers.get('If-Match'):
                    body['ZoneETag'] = headers['If-Match']
                _, endpoint_etag = conn.read(uri, models.Endpoint)
                if endpoint_etag:
                    body['EndpointETag'] = endpoint_etag
                return conn.post(target, body, headers=headers)
            wanted = (current + [uri] if add
                      else [u for u in current if u != uri])
            return conn.patch(zone_uri, {'Links': {'Endpoints': [
                {'@odata.id': u} for u in wanted]}}, headers=headers)

        what = '%s of %s' % (action, uri)
        response = self._etag_retry(conn, zone_uri, models.FabricZone, send,
                                    what)
        if response is not None:
            self._task_answer(conn, info, response, zone_uri, deadline)

    def _connect_endpoint(self, conn, info, zoning, system, uri, deadline):
        """POST a Connection from the system's initiator to ``uri``."""
        initiators = zoning.initiators_of(system)
        body = {'Name': 'Endpoint %s for %s' % (uri.rsplit('/', 1)[-1],
                                                system.rsplit('/', 1)[-1]),
                'Links': {'InitiatorEndpoints': [{'@odata.id':
                                                  initiators[0]}],
                          'TargetEndpoints': [{'@odata.id': uri}]}}
        path = zoning.fabric.connections
        try:
            response = conn.post(path, body)
            self._task_answer(conn, info, response, path, deadline)
        except connection.HTTPFailure:
            # A repeated request may have been done already.
            if not self._zoning(conn, info).connections_of(system, uri):
                raise

    def _create_zone(self, conn, info, zoning, system, uri, deadline):
        """POST a zone of the system's initiators and ``uri`` to the
        fabric's Zones (a host with no zone of its own, on a fabric
        without Connections)."""
        initiators = zoning.initiators_of(system)
        body = {'Name': 'Endpoint %s for %s' % (uri.rsplit('/', 1)[-1],
                                                system.rsplit('/', 1)[-1]),
                'ZoneType': 'ZoneOfEndpoints',
                'Links': {'Endpoints': [{'@odata.id': u}
                                        for u in initiators + [uri]]}}
        path = zoning.fabric.zones
        try:
            response = conn.post(path, body)
            self._task_answer(conn, info, response, path, deadline)
        except connection.HTTPFailure as exc:
            # A repeated request may have been done already.
            if system in self._zoning(conn, info).holders(uri):
                return
            raise exception.DriverError(
                reason='system %s has no zone of its own on fabric %s and '
                       'the fabric has no Connections; making a zone of '
                       'its initiator and endpoint %s failed: %s' %
                       (system, zoning.fabric.uri, uri, _reason(exc)))

    def _take_out_of_zone(self, conn, info, zoning, system, zone, uri,
                          deadline):
        """Take ``uri`` out of the system's zone; where the service
        refuses to change the zone and it holds nothing but the system's
        initiators and ``uri`` (a zone made for the device), delete the
        zone."""
        try:
            self._zone_change(conn, info, zone.uri, uri, False, deadline)
        except connection.HTTPFailure as exc:
            own = set(zoning.initiators_of(system)) | {uri}
            if exc.status not in (400, 405, 501) or not (
                    zoning.members(zone.uri) <= own):
                raise
            LOG.info('Redfish service %(addr)s does not change zone '
                     '%(zone)s (HTTP %(status)s); deleting it, it holds '
                     'only endpoint %(uri)s and its host',
                     {'addr': conn.address, 'zone': zone.uri,
                      'status': exc.status, 'uri': uri})
            self._delete(conn, info, zone.uri, models.FabricZone,
                         deadline)

    def _delete(self, conn, info, uri, model, deadline):
        """DELETE with If-Match (again after a 412); one already gone
        is fine."""
        try:
            response = self._etag_retry(
                conn, uri, model,
                lambda current, headers: conn.delete(uri, headers=headers),
                'DELETE')
            self._task_answer(conn, info, response, uri, deadline)
        except connection.HTTPFailure as exc:
            if exc.status != 404:
                raise

    def _zones_unbind(self, conn, info, fabric, uri, host, deadline):
        zoning = self._zoning(conn, info)
        holders = zoning.holders(uri)
        if host is not None:
            try:
                system, _ = self._system(conn, info, fabric, host)
            except exception.DriverError:
                if holders:
                    raise
                LOG.warning('Endpoint %(uri)s is given to no system; the '
                            'system of host %(host)s is not found either',
                            {'uri': uri, 'host': host.get('name')})
                return
            systems = [system.uri] if system.uri in holders else []
        else:
            systems = holders
        for system in systems:
            for zone in zoning.own_zones(system):
                if uri in zoning.members(zone.uri):
                    self._take_out_of_zone(conn, info, zoning, system, zone,
                                           uri, deadline)
            for link in zoning.connections_of(system, uri):
                self._delete(conn, info, link.uri,
                             models.FabricConnection, deadline)
        if not systems:
            return
        left = [s for s in self._zoning(conn, info).holders(uri)
                if s in systems]
        if left:
            raise exception.DriverError(
                reason='Redfish service %s still gives endpoint %s to '
                       'system %s after it was taken out of its zones and '
                       'connections' % (conn.address, uri, left[0]))
        LOG.info('Endpoint %(uri)s taken from %(systems)s',
                 {'uri': uri, 'systems': ', '.join(systems)})

    def _zones_discover(self, conn, info, fabric):
        zoning = self._zoning(conn, info)
        systems, unreadable = self._systems(conn)
        names = self._host_names(conn, info, systems, unreadable,
                                 fabric.get('hosts'))
        found = []
        for uri in zoning.listed:
            if uri in zoning.unreadable:
                found.append(_unknown(uri, zoning.unreadable[uri]))
                continue
            if zoning.is_initiator(uri):
                continue
            endpoint = zoning.endpoints[uri]
            targets = endpoint.targets()
            # The fabric's own parts (its switch in every zone) are held
            # by no one.
            part = bool(targets) and all(e.fabric_part for e in targets)
            why = None if part else zoning.unknown_reason(endpoint)
            if why:
                found.append(_unknown(uri, why))
                continue
            try:
                device = self._endpoint_device(conn, endpoint)
            except LOCAL_ERRORS as exc:
                found.append(_unknown(uri, _reason(exc)))
                continue
            except models.ParseError as exc:
                found.append(_unknown(
                    uri, 'Redfish service %s: what endpoint %s connects is '
                    'not what it should be: %s' % (conn.address, uri, exc)))
                continue
            held = [] if part else zoning.holders(uri)
            lost = [s for s in held if s in unreadable]
            if lost:
                found.append(_unknown(
                    uri, 'it is given to system %s, which could not be '
                    'read: %s' % (lost[0], unreadable[lost[0]])))
                continue
            bound = [names.get(s, s) for s in held]
            item = {
                'address': uri,
                'kind': device.kind or 'pci',
                'model': device.model,
                'vendor_id': device.vendor_id,
                'product_id': device.product_id,
                'serial': device.serial,
                'health': device.health,
                'state': endpoint.state,
                'hosts': sorted(names.get(s, s) for s in zoning.reach(uri)),
                'bound_to': ', '.join(bound) if bound else None,
                'holders': bound,
            }
            if device.not_poolable:
                item['not_poolable'] = device.not_poolable
            why = self._endpoint_unavailable(endpoint, device)
            if why:
                item['unavailable'] = why
            found.append(item)
        return found


# ConnectedEntities EntityType -> the resource type its EntityLink leads
# to, where the resource does not say (@odata.type).
_ENTITY_HINTS = {'Processor': 'Processor', 'Drive': 'Drive',
                 'NetworkController': 'NetworkAdapter',
                 'DisplayController': 'PCIeFunction',
                 'AccelerationFunction': 'Processor',
                 'CXLDevice': 'CXLLogicalDevice',
                 'StorageInitiator': 'PCIeFunction',
                 'MediaController': 'PCIeFunction'}
