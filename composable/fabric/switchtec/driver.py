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

"""Fabric driver for Microchip Switchtec PCIe switches (PAX, PSX, PFX).

Two modes, chosen by the fabric's ``driver_info['mode']``:

``gfms`` (default, PAX fabrics)
    A device is an endpoint function, addressed by its PDFID
    (``device['address']``, ``"0x0100"``). A host is a host virtual domain:
    the host's switch index and physical port, and the logical ports of
    that domain the driver may bind functions to. State is read from
    ``switchtec fabric gfms_dump -t PAX_ALL``; a function is bound with
    ``gfms_bind`` to a free logical port of the host, unbound with
    ``gfms_unbind`` of the logical port holding it. The address the host
    sees comes from ``gfms_dump -t HVD_DETAIL``.
``partition`` (PSX/PFX)
    A device is the physical (downstream) port it sits behind
    (``device['address']``, ``"12"``). A host is a partition and the
    logical ports of that partition the driver may use: ``port-bind``,
    ``port-unbind``, state from ``port-bind-info``.

See doc/source/admin/fabric-switchtec.rst for driver_info.

One switch runs one operation at a time: every call takes the lock of
the fabric's ``device`` for its whole read-decide-write sequence.
"""

import contextlib
import math
import threading

from oslo_log import log as logging

from composable.common import exception
from composable.common import locator as locator_mod
from composable import conf
from composable.fabric import base
from composable.fabric.switchtec import cli as switchtec_cli
from composable.fabric.switchtec import parsers
from composable.privsep import fabric as priv_fabric

CONF = conf.CONF
LOG = logging.getLogger(__name__)

MODE_GFMS = 'gfms'
MODE_PARTITION = 'partition'
MODES = (MODE_GFMS, MODE_PARTITION)
DEFAULT_TIMEOUT = 30
MAX_TIMEOUT = priv_fabric.MAX_TIMEOUT

_KEYS = ('mode', 'device', 'timeout', 'hosts')
_HOST_KEYS = {
    MODE_GFMS: ('switch_index', 'phys_port', 'logical_ports'),
    MODE_PARTITION: ('partition', 'logical_ports'),
}

# One lock per switch device, for every driver instance of the process.
#
# Process-wide is enough for the conductor itself: its flows run in
# threads of one process, and a lease's reservation already makes sure
# only one flow (of any conductor) works on a lease, hence on a device,
# at a time. It is NOT enough across several conductors: two conductors
# holding reservations of two different leases may run commands on the
# same switch at once. The CLI's own requests to the firmware are
# queued one at a time by the switchtec kernel driver, so each command is
# whole; what can race is the read-then-bind sequence (two binds picking
# the same free logical port). The second gfms_bind is then refused by
# the switch and that flow fails with the switch's message, leaving
# nothing half done; deployments that want no such failures have one
# conductor manage a given switch.
_LOCKS = {}
_LOCKS_GUARD = threading.Lock()

# port-bind-info's bind state of a physical port -> its health: a failed
# bind needs an operator, one in progress is not usable yet.
_PORT_HEALTH = {
    'bound': base.HEALTH_OK,
    'unbound': base.HEALTH_OK,
    'fail': base.HEALTH_CRITICAL,
    'in_progress': base.HEALTH_WARNING,
}


def _switch_lock(device):
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(device, threading.Lock())


@contextlib.contextmanager
def one_operation(device, wait):
    """Hold the lock of switch ``device``; fail after ``wait`` seconds."""
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or \
            not math.isfinite(wait) or wait <= 0:
        raise exception.DriverError(
            reason='switch %s: %r is not a time to wait for it' %
            (device, wait))
    lock = _switch_lock(device)
    if not lock.acquire(timeout=wait):
        raise exception.DriverError(
            reason='switch %s is busy with another operation; it did not '
                   'become free within %s seconds' % (device, wait))
    try:
        yield
    finally:
        lock.release()


def _is_int(value, minimum=0):
    return (isinstance(value, int) and not isinstance(value, bool)
            and value >= minimum)


def _invalid(key, must):
    return exception.Invalid(reason='driver_info %s %s' % (key, must))


class SwitchtecFabricDriver(base.FabricDriver):

    def __init__(self, runner=None):
        # runner: the function that runs an argv as root; the privsep
        # entry point unless a test gives another.
        self._runner = runner or priv_fabric.switchtec

    # ---------------------------------------------------------- driver_info

    def validate_driver_info(self, driver_info):
        info = driver_info
        if not isinstance(info, dict):
            raise exception.Invalid(reason='driver_info must be an object')
        for key in info:
            if key == 'cli':
                raise _invalid(key, 'is not a setting of the switchtec '
                                    'driver: the switchtec command is set '
                                    'in the conductor\'s configuration '
                                    '([fabric]switchtec_command)')
            if key not in _KEYS:
                raise _invalid(key, 'is not a setting of the switchtec '
                                    'driver (known: %s)' % ', '.join(_KEYS))
        mode = info.get('mode', MODE_GFMS)
        if mode not in MODES:
            raise _invalid('mode', 'must be "gfms" or "partition"')
        device = info.get('device')
        if not isinstance(device, str) or not device:
            raise _invalid('device', 'is required: the switch as the '
                                     'switchtec CLI names it '
                                     '("/dev/switchtec0")')
        if not priv_fabric.DEVICE_PATTERN.fullmatch(device):
            raise _invalid('device', 'is not a switchtec device name '
                                     '(/dev/switchtec<N>, '
                                     '<pax id>@/dev/switchtec<N>, '
                                     '/dev/i2c-<N>@<address>, '
                                     '<adapter>@<address> or '
                                     '<host>:<instance>)')
        timeout = info.get('timeout', DEFAULT_TIMEOUT)
        if isinstance(timeout, bool) or \
                not isinstance(timeout, (int, float)) or \
                not math.isfinite(timeout) or timeout <= 0:
            raise _invalid('timeout', 'must be a finite number of seconds '
                                      '> 0')
        if timeout > MAX_TIMEOUT:
            raise _invalid('timeout', 'must be at most %d seconds: a '
                                      'switch command that runs longer is '
                                      'stuck' % MAX_TIMEOUT)
        hosts = info.get('hosts')
        if not isinstance(hosts, dict) or not hosts:
            raise _invalid('hosts', 'is required: an object mapping each '
                                    'host name to its ports on the switch')
        owners = {}
        for name, mapping in hosts.items():
            self._validate_host(mode, name, mapping, owners)

    @staticmethod
    def _validate_host(mode, name, mapping, owners):
        prefix = 'hosts.%s' % name
        if not isinstance(mapping, dict):
            raise _invalid(prefix, 'must be an object')
        known = _HOST_KEYS[mode]
        for key in mapping:
            if key not in known:
                raise _invalid('%s.%s' % (prefix, key),
                               'is not a host setting in %s mode (known: '
                               '%s)' % (mode, ', '.join(known)))
        for key in known:
            if key == 'logical_ports':
                continue
            if not _is_int(mapping.get(key)):
                raise _invalid('%s.%s' % (prefix, key),
                               'is required: an integer >= 0')
        ports = mapping.get('logical_ports')
        # port-bind takes logical ports from 1.
        least = 1 if mode == MODE_PARTITION else 0
        if not isinstance(ports, list) or not ports or not all(
                _is_int(p, least) for p in ports):
            raise _invalid('%s.logical_ports' % prefix,
                           'is required: a non-empty list of integers '
                           '>= %d' % least)
        if len(set(ports)) != len(ports):
            raise _invalid('%s.logical_ports' % prefix,
                           'lists a port twice')
        if mode == MODE_GFMS:
            where = (mapping['switch_index'], mapping['phys_port'])
            what = 'switch_index and phys_port'
        else:
            where = mapping['partition']
            what = 'partition'
        if where in owners:
            raise _invalid('%s.%s' % (prefix, what.split()[-1]),
                           'is the same %s as host %s' % (what,
                                                          owners[where]))
        owners[where] = name

    def _info(self, fabric):
        info = fabric.get('driver_info') or {}
        try:
            self.validate_driver_info(info)
        except exception.Invalid as exc:
            raise exception.DriverError(
                reason='fabric %s: %s' % (fabric.get('name'), exc.message))
        return info

    def _cli(self, info):
        return switchtec_cli.SwitchtecCli(
            info['device'], program=CONF.fabric.switchtec_command,
            timeout=info.get('timeout', DEFAULT_TIMEOUT),
            runner=self._runner)

    @staticmethod
    def _lock_wait(info):
        # driver_info was validated: its timeout is finite and at most
        # MAX_TIMEOUT.
        return max(float(info.get('timeout', DEFAULT_TIMEOUT)),
                   float(CONF.fabric.operation_timeout))

    @staticmethod
    def _mapping(fabric, info, host):
        name = (host or {}).get('name')
        mapping = info['hosts'].get(name)
        if mapping is None:
            raise exception.DriverError(
                reason='host %s has no port mapping in the driver_info of '
                       'fabric %s' % (name, fabric.get('name')))
        return name, mapping

    # ---------------------------------------------------------- interface

    def bind_device(self, fabric, device, host):
        info = self._info(fabric)
        name, mapping = self._mapping(fabric, info, host)
        with one_operation(info['device'], self._lock_wait(info)):
            if info.get('mode', MODE_GFMS) == MODE_PARTITION:
                return self._partition_bind(fabric, info, device, name,
                                            mapping)
            return self._gfms_bind(fabric, info, device, name, mapping)

    def unbind_device(self, fabric, device, host):
        info = self._info(fabric)
        name = mapping = None
        if host:
            name, mapping = self._mapping(fabric, info, host)
        with one_operation(info['device'], self._lock_wait(info)):
            if info.get('mode', MODE_GFMS) == MODE_PARTITION:
                return self._partition_unbind(fabric, info, device, name,
                                              mapping)
            return self._gfms_unbind(fabric, info, device, name, mapping)

    def discover(self, fabric):
        """The devices of the fabric as the switch reports them."""
        info = self._info(fabric)
        with one_operation(info['device'], self._lock_wait(info)):
            if info.get('mode', MODE_GFMS) == MODE_PARTITION:
                return self._partition_discover(info)
            return self._gfms_discover(info)

    # --------------------------------------------------------------- gfms

    @staticmethod
    def _pdfid(fabric, device):
        try:
            return parsers.pdfid(device.get('address'))
        except (TypeError, ValueError):
            raise exception.DriverError(
                reason='device %s of fabric %s has address %r, not a PDFID '
                       '("0x0100")' % (device.get('uuid'),
                                       fabric.get('name'),
                                       device.get('address')))

    @staticmethod
    def _holder(state, pdfid):
        """(switch index, physical port, logical port) holding ``pdfid``,
        or None."""
        for func in state['functions']:
            if func['pdfid'] == pdfid and func['bound']:
                return (func['bound_pax_id'], func['bound_phys_port'],
                        func['bound_log_port'])
        for hvd in state['hvds']:
            for log_port, bound in hvd['logical_ports'].items():
                if bound == pdfid:
                    return (state['pax_id'], hvd['phys_port'], log_port)
        return None

    @staticmethod
    def _host_at(info, switch_index, phys_port):
        for name, mapping in info['hosts'].items():
            if (mapping['switch_index'], mapping['phys_port']) == (
                    switch_index, phys_port):
                return name
        return None

    @staticmethod
    def _used_ports(state, switch_index, phys_port):
        used = set()
        for func in state['functions']:
            if func['bound'] and (func['bound_pax_id'],
                                  func['bound_phys_port']) == (
                    switch_index, phys_port):
                used.add(func['bound_log_port'])
        if state['pax_id'] == switch_index:
            for hvd in state['hvds']:
                if hvd['phys_port'] == phys_port:
                    used.update(port for port, bound
                                in hvd['logical_ports'].items()
                                if bound is not None)
        return used

    def _gfms_bind(self, fabric, info, device, name, mapping):
        pdfid = self._pdfid(fabric, device)
        cli = self._cli(info)
        state = cli.pax_all()
        func = next((f for f in state['functions'] if f['pdfid'] == pdfid),
                    None)
        if func is None:
            raise exception.DriverError(
                reason='switch %s reports no function with PDFID %s' %
                (info['device'], pdfid))
        here = (mapping['switch_index'], mapping['phys_port'])
        holder = self._holder(state, pdfid)
        if holder is not None:
            if holder[:2] != here:
                other = self._host_at(info, *holder[:2])
                raise exception.DriverError(
                    reason='function %s is bound to %s (switch %d, '
                           'physical port %d, logical port %d), not to '
                           'host %s' % (pdfid,
                                        'host %s' % other if other
                                        else 'a port no host maps to',
                                        holder[0], holder[1], holder[2],
                                        name))
            log_port = holder[2]
            LOG.info('Function %(f)s is already bound to host %(h)s '
                     '(logical port %(l)d) on %(dev)s',
                     {'f': pdfid, 'h': name, 'l': log_port,
                      'dev': info['device']})
        else:
            used = self._used_ports(state, *here)
            free = [p for p in mapping['logical_ports'] if p not in used]
            if not free:
                raise exception.DriverError(
                    reason='host %s has no free logical port on switch %s: '
                           'logical ports %s are all bound' % (
                               name, info['device'],
                               ', '.join(str(p) for p in
                                         mapping['logical_ports'])))
            log_port = free[0]
            LOG.info('Binding function %(f)s to host %(h)s (switch %(s)d, '
                     'physical port %(p)d, logical port %(l)d) on %(dev)s',
                     {'f': pdfid, 'h': name, 's': here[0], 'p': here[1],
                      'l': log_port, 'dev': info['device']})
            cli.gfms_bind(here[0], here[1], log_port, pdfid)
        return locator_mod.Locator(
            vendor_id=device.get('vendor_id') or func['vendor_id'],
            product_id=device.get('product_id') or func['product_id'],
            pci_address=self._bus_address(cli, state, here, log_port,
                                          pdfid),
            fabric_ref=pdfid)

    @staticmethod
    def _bus_address(cli, state, here, log_port, pdfid):
        """The address the host sees the function at, or None."""
        if state['pax_id'] != here[0]:
            # The host's domain lives on another switch of the fabric,
            # whose database this device does not dump.
            return None
        hvd = next((h for h in state['hvds'] if h['phys_port'] == here[1]),
                   None)
        if hvd is None:
            return None
        try:
            detail = cli.hvd_detail(hvd['hvd_id'])
        except exception.DriverError as exc:
            LOG.warning('Function %(f)s is bound, but its bus address is '
                        'unknown: %(err)s', {'f': pdfid, 'err': exc.message})
            return None
        bound = detail['logical_ports'].get(log_port)
        if not bound or bound['pdfid'] != pdfid:
            return None
        return bound['pci_address']

    def _gfms_unbind(self, fabric, info, device, name, mapping):
        pdfid = self._pdfid(fabric, device)
        cli = self._cli(info)
        state = cli.pax_all()
        holder = self._holder(state, pdfid)
        if holder is None:
            LOG.info('Function %(f)s is not bound on %(dev)s: nothing to '
                     'unbind', {'f': pdfid, 'dev': info['device']})
            return
        if mapping is not None and holder[:2] != (mapping['switch_index'],
                                                  mapping['phys_port']):
            # Another host's binding is left alone: taking a device from
            # a running instance is never what an unbind for this host
            # means.
            LOG.warning('Function %(f)s is bound to switch %(s)d physical '
                        'port %(p)d, not to host %(h)s: left bound',
                        {'f': pdfid, 's': holder[0], 'p': holder[1],
                         'h': name})
            return
        LOG.info('Unbinding function %(f)s (switch %(s)d, physical port '
                 '%(p)d, logical port %(l)d) on %(dev)s',
                 {'f': pdfid, 's': holder[0], 'p': holder[1],
                  'l': holder[2], 'dev': info['device']})
        cli.gfms_unbind(*holder)

    def _gfms_discover(self, info):
        state = self._cli(info).pax_all()
        names = sorted(info['hosts'])
        found = []
        for func in state['functions']:
            holder = self._holder(state, func['pdfid'])
            found.append({
                'address': func['pdfid'],
                'kind': parsers.kind_of_class(func['class_code']),
                'model': None,
                'vendor_id': func['vendor_id'],
                'product_id': func['product_id'],
                'serial': None,
                'health': base.HEALTH_OK,
                # Every host virtual domain of a PAX fabric reaches every
                # endpoint function.
                'hosts': list(names),
                'bound_to': self._gfms_bound_to(info, holder),
                'fabric_binding': (
                    dict(zip(('switch_index', 'phys_port',
                              'logical_port'), holder))
                    if holder else None),
            })
        return found

    @classmethod
    def _gfms_bound_to(cls, info, holder):
        """Who holds a function, as discovery reports it: the host's
        name, a description of the port when no host of driver_info maps
        to it (bound outside composable: not free), or None."""
        if holder is None:
            return None
        return cls._host_at(info, *holder[:2]) or (
            'PAX %d HVD port %d' % (holder[0], holder[1]))

    # ---------------------------------------------------------- partition

    @staticmethod
    def _phys_port(fabric, device):
        address = device.get('address')
        try:
            if isinstance(address, bool):
                raise ValueError(address)
            port = int(str(address).strip(), 10)
            if port < 0:
                raise ValueError(address)
        except (TypeError, ValueError):
            raise exception.DriverError(
                reason='device %s of fabric %s has address %r, not a '
                       'physical port number' % (device.get('uuid'),
                                                 fabric.get('name'),
                                                 address))
        return port

    @staticmethod
    def _partition_host(info, partition):
        for name, mapping in info['hosts'].items():
            if mapping['partition'] == partition:
                return name
        return None

    def _partition_bind(self, fabric, info, device, name, mapping):
        phys = self._phys_port(fabric, device)
        cli = self._cli(info)
        ports = cli.port_bind_info()
        current = ports.get(phys)
        if current is None:
            raise exception.DriverError(
                reason='switch %s reports no physical port %d' %
                (info['device'], phys))
        if current['state'] in ('fail', 'in_progress'):
            raise exception.DriverError(
                reason='physical port %d of switch %s reports bind state '
                       '%s; try again later' % (phys, info['device'],
                                                current['state']))
        partition = mapping['partition']
        if current['state'] == 'bound':
            if current['partition'] != partition:
                other = self._partition_host(info, current['partition'])
                raise exception.DriverError(
                    reason='physical port %d is bound to %s (partition %d, '
                           'logical port %d), not to host %s' % (
                               phys, 'host %s' % other if other
                               else 'a partition no host maps to',
                               current['partition'],
                               current['logical_port'], name))
        else:
            used = {p['logical_port'] for p in ports.values()
                    if p['state'] == 'bound' and
                    p['partition'] == partition}
            free = [p for p in mapping['logical_ports'] if p not in used]
            if not free:
                raise exception.DriverError(
                    reason='host %s has no free logical port in partition '
                           '%d of switch %s: logical ports %s are all '
                           'bound' % (name, partition, info['device'],
                                      ', '.join(str(p) for p in
                                                mapping['logical_ports'])))
            LOG.info('Binding physical port %(p)d to host %(h)s '
                     '(partition %(n)d, logical port %(l)d) on %(dev)s',
                     {'p': phys, 'h': name, 'n': partition, 'l': free[0],
                      'dev': info['device']})
            cli.port_bind(partition, free[0], phys)
        # port-bind-info does not tell the host's bus address.
        return locator_mod.Locator(vendor_id=device.get('vendor_id'),
                                   product_id=device.get('product_id'),
                                   fabric_ref=str(phys))

    def _partition_unbind(self, fabric, info, device, name, mapping):
        phys = self._phys_port(fabric, device)
        cli = self._cli(info)
        current = cli.port_bind_info().get(phys)
        if current is None or current['state'] != 'bound':
            LOG.info('Physical port %(p)d is not bound on %(dev)s: nothing '
                     'to unbind', {'p': phys, 'dev': info['device']})
            return
        if mapping is not None and \
                current['partition'] != mapping['partition']:
            LOG.warning('Physical port %(p)d is bound to partition %(n)d, '
                        'not to host %(h)s: left bound',
                        {'p': phys, 'n': current['partition'], 'h': name})
            return
        cli.port_unbind(current['partition'], current['logical_port'])

    def _partition_discover(self, info):
        ports = self._cli(info).port_bind_info()
        names = sorted(info['hosts'])
        found = []
        for phys in sorted(ports):
            current = ports[phys]
            bound = current['state'] == 'bound'
            found.append({
                'address': str(phys), 'kind': 'pci', 'model': None,
                'vendor_id': None, 'product_id': None, 'serial': None,
                'health': _PORT_HEALTH.get(current['state'],
                                           base.HEALTH_WARNING),
                'hosts': list(names),
                'bound_to': (self._partition_host(info,
                                                  current['partition']) or
                             'partition %d logical port %d' % (
                                 current['partition'],
                                 current['logical_port'])
                             if bound else None),
                'fabric_binding': (
                    {'partition': current['partition'],
                     'logical_port': current['logical_port']}
                    if bound else None),
            })
        return found
