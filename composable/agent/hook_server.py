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

"""The unix socket the libvirt hook of this compute node talks to.

composable-libvirt-hook (composable/hooks/libvirt.py) runs inside
libvirtd for every start and stop of every domain on the host. It sends
one JSON line, ``{"op": "prepare", "instance": <uuid>, ...}``, and waits
for one JSON line back, ``{"ok": true|false, "abort": bool, "message":
...}``. This module answers it, one thread per connection:

``prepare``
    An instance that has no lease (the agent keeps the list of instances
    that have leases in memory, see LeaseCache) is answered at once. For
    the others the conductor binds the instance's leases to this host
    (``prepare_instance``, the ordinary bind flow) and answers once they
    are bound or after ``[compute_node]hook_prepare_timeout`` seconds.
    Guest-mode memory and passed-through devices cannot be hot-plugged yet
    (QEMU does not run): the bind flow's attach_memory call is answered
    "deferred", attach_devices binds the functions on the host only, and
    what goes into the guest is kept here until ``started``.
``started``
    The deferred extents, devices and virtio-mem devices (the CXL memory
    of virtio-mem leases, onlined on the host at prepare) are hot-plugged
    into the guest, in a thread, after the hook has returned. A lease
    whose hot-plug fails is unbound (it stays the instance's) with the
    reason as its fault: a guest without a free PCIe hot-plug slot, or a
    domain without ``<maxMemory>``, says so.
``stopped`` / ``release``
    The conductor unbinds the instance's leases from this host
    (``release_instance``); they stay the instance's for its next start.
``reconnect``
    After the hook has returned, a thread checks that the guest-mode
    disks, the virtio-mem devices and the passed-through devices of the
    instance's bound leases are still in the domain, and binds them again
    if not.
``migrate``
    The instance is marked as arriving by live migration: its next
    prepare does not take its leases from the host it comes from. An
    instance holding passed-through devices or guest-mode memory cannot
    be live migrated: the hook refuses (the migration fails, the guest
    goes on running where it is). The conductor is asked about every
    incoming instance, not only those this host knows leases of: a lease
    on another fabric is not in this host's cache.

While libvirtd runs a hook it holds the domain: a libvirt call on that
domain made by this agent before the hook returns would wait for the hook
forever. Hence the deferred hot-plug, and ``domain_busy``: a guest-mode
detach asked for while the hook of the domain runs removes only the
libvirt secrets (QEMU is gone, and its disks with it).

The socket is mode 0600 (0660 with ``[compute_node]hook_socket_group``);
peers are also checked by their credentials (SO_PEERCRED).
"""

import contextlib
import grp
import os
import socket
import socketserver
import struct
import threading
import time

from oslo_log import log as logging
import oslo_messaging as messaging

from composable.agent.compute_node import hostdev
from composable.agent.compute_node import libvirt_guest
from composable.agent.compute_node import virtio_mem
from composable.common import context as composable_context
from composable.common import exception
from composable.common import states
from composable import conf
from composable.hooks import wire

CONF = conf.CONF
LOG = logging.getLogger(__name__)

PROTOCOL = wire.PROTOCOL
MAX_REQUEST = 1 << 20
ABORT = 'abort'
CONTINUE = 'continue'
_FLAVOR_POLICY = {'fail': ABORT, 'ignore': CONTINUE}

# How long a migrate hook marks an instance as arriving, and how long a
# stop that unbound the leases answers the release hook that follows.
INCOMING_TTL = 3600.0
RELEASED_TTL = 300.0
# Hot-plug attempts at started: QEMU may still be finishing its start.
ATTACH_ATTEMPTS = 3
ATTACH_RETRY_DELAY = 2.0
# What _plug_with_retries answers when the domain stopped meanwhile.
_STOPPED = object()
# Cache refresh: retry this soon after a failure.
REFRESH_RETRY = 5.0
# Seconds a prepare waits for a first cache load before going on.
FIRST_LOAD_WAIT = 5.0
# RPC round trips on top of the conductor's own bounded wait.
RPC_MARGIN = 15.0

_UCRED = struct.Struct('3i')


def _live_migration():
    """composable.common.live_migration (what cannot follow a live
    migration: the conductor's rule), imported when needed."""
    from composable.common import live_migration
    return live_migration


def _ok(**kwargs):
    reply = {'v': PROTOCOL, 'ok': True}
    reply.update(kwargs)
    return reply


def _refused(message, abort=False, **kwargs):
    reply = {'v': PROTOCOL, 'ok': False, 'abort': abort, 'message': message}
    reply.update(kwargs)
    return reply


class LeaseCache(object):
    """Which instances have leases, as far as this agent knows:
    instance uuid -> lease uuids.

    Loaded from the conductor (``instance_leases``) at start and every
    ``hook_cache_refresh_interval`` seconds; kept current between loads by
    what the conductor pushes and by the answers to prepare and release.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._leases = {}
        self._loaded = False
        self._stamps = {}

    @property
    def loaded(self):
        return self._loaded

    def leases_of(self, instance_uuid):
        """Sorted lease uuids, [] for none, None when unknown (never
        loaded, and nothing heard about the instance)."""
        with self._lock:
            leases = self._leases.get(instance_uuid)
            if leases:
                return sorted(leases)
            if self._loaded or instance_uuid in self._stamps:
                return []
            return None

    def set(self, instance_uuid, lease_uuids):
        with self._lock:
            self._stamps[instance_uuid] = time.monotonic()
            if lease_uuids:
                self._leases[instance_uuid] = set(lease_uuids)
            else:
                self._leases.pop(instance_uuid, None)

    def add(self, instance_uuid, lease_uuid):
        with self._lock:
            self._stamps[instance_uuid] = time.monotonic()
            self._leases.setdefault(instance_uuid, set()).add(lease_uuid)

    def replace(self, mapping, since):
        """Take a snapshot read from the conductor that started at
        ``since`` (time.monotonic()): what was heard about an instance
        after that is newer than the snapshot and stays."""
        fresh = {i: set(l) for i, l in mapping.items() if l}
        with self._lock:
            for instance, stamp in self._stamps.items():
                if stamp >= since:
                    if instance in self._leases:
                        fresh[instance] = self._leases[instance]
                    else:
                        fresh.pop(instance, None)
            self._leases = fresh
            self._stamps = {i: s for i, s in self._stamps.items()
                            if s >= since}
            self._loaded = True

    def instances(self):
        with self._lock:
            return len(self._leases)


class _Handler(socketserver.StreamRequestHandler):

    def handle(self):
        hook = self.server.hook
        if not hook.peer_allowed(self.request):
            self._send(_refused('not allowed'))
            return
        line = self.rfile.readline(MAX_REQUEST + 1)
        if not line:
            return
        self._send(hook.handle_line(line))

    def _send(self, reply):
        try:
            self.wfile.write(wire.encode_line(reply))
            self.wfile.flush()
        except OSError:
            # The hook gave up (its own timeout); it has decided already.
            pass


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    # Hooks of many domains starting at once (a host reboot).
    request_queue_size = 64

    def __init__(self, hook, sock):
        self.hook = hook
        socketserver.BaseServer.__init__(self, sock.getsockname(),
                                         _Handler)
        self.socket = sock

    def handle_error(self, request, client_address):
        LOG.exception('Error while answering the libvirt hook')


class HookServer(object):
    """Serves the libvirt hook of one compute node.

    ``node`` is the node's ComputeNodeParts
    (composable.agent.compute_node.parts): the attachers the deferred
    hot-plugs use, the record of what is attached, and whether the back
    ends are simulated. The hook server holds nothing of the RPC
    endpoint; the endpoint hands it what waits for a domain's start
    (defer_guest_attach, defer_guest_devices) and what a detach cancels
    (forget_guest, forget_guest_devices).

    ``conductor`` (a ConductorAPI) and ``path`` can be injected; by
    default they come from composable.conductor.rpcapi and
    ``[compute_node]hook_socket``.
    """

    def __init__(self, node, path=None, group=None, conductor=None,
                 refresh_interval=None):
        self.node = node
        self.host = node.host
        self.path = path if path is not None else \
            CONF.compute_node.hook_socket
        self.group = group if group is not None else \
            CONF.compute_node.hook_socket_group
        self.refresh_interval = (
            refresh_interval if refresh_interval is not None
            else CONF.compute_node.hook_cache_refresh_interval)
        self._conductor = conductor
        self.cache = LeaseCache()
        self._lock = threading.Lock()
        self._preparing = {}
        self._busy = {}
        self._pending = {}
        self._pending_devices = {}
        # instance -> {lease uuid: (lease, {'nodes', 'size_mb',
        # 'requested_mb'})}: the virtio-mem devices that wait for
        # ``started``.
        self._pending_vmem = {}
        # (instance, lease) -> True once an unbind cancelled the hot-plug
        # a started thread is about to make.
        self._plugging = {}
        self._incoming = {}
        self._released = {}
        self._server = None
        self._threads = []
        self._stopping = threading.Event()
        self._loaded = threading.Event()
        self._gid = None
        self._inode = None
        self.requests = 0

    @property
    def conductor(self):
        if self._conductor is None:
            from composable.conductor import rpcapi
            self._conductor = rpcapi.ConductorAPI()
        return self._conductor

    # ------------------------------------------------------------ life

    def start(self):
        self._stopping.clear()
        if self.group:
            try:
                self._gid = grp.getgrnam(self.group).gr_gid
            except KeyError:
                raise exception.DriverError(
                    reason='[compute_node]hook_socket_group %s is not a '
                           'group on this host' % self.group)
        sock = self._listen()
        self._server = _Server(self, sock)
        self._spawn('hook-server', self._server.serve_forever)
        self._spawn('hook-cache', self._refresh_loop)
        LOG.info('Answering the libvirt hook on %(path)s (mode %(mode)s)',
                 {'path': self.path,
                  'mode': '0660, group %s' % self.group if self.group
                  else '0600'})

    def _spawn(self, name, target, *args):
        thread = threading.Thread(target=target, args=args, daemon=True,
                                  name=name)
        thread.start()
        self._threads.append(thread)
        return thread

    def _listen(self):
        directory = os.path.dirname(self.path) or '.'
        os.makedirs(directory, mode=0o755, exist_ok=True)
        if os.path.exists(self.path):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            probe.settimeout(1)
            try:
                probe.connect(self.path)
            except OSError:
                # Left behind by an agent that was killed.
                os.unlink(self.path)
            else:
                raise exception.DriverError(
                    reason='something already answers on %s: another '
                           'composable-agent? Stop it, or give this one '
                           'another [compute_node]hook_socket' % self.path)
            finally:
                probe.close()
        # Bound under a temporary name and renamed once its mode is set:
        # no one can connect to it before that.
        tmp = os.path.join(directory, '.%s.%d' % (
            os.path.basename(self.path), os.getpid()))
        if os.path.exists(tmp):
            os.unlink(tmp)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(tmp)
            if self._gid is not None:
                os.chown(tmp, -1, self._gid)
                os.chmod(tmp, 0o660)
            else:
                os.chmod(tmp, 0o600)
            sock.listen(_Server.request_queue_size)
            os.rename(tmp, self.path)
        except Exception:
            sock.close()
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        self._inode = os.stat(self.path).st_ino
        return sock

    def stop(self):
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
            try:
                # Only our own socket: another agent may have taken the
                # path over since.
                if os.stat(self.path).st_ino == self._inode:
                    os.unlink(self.path)
            except OSError:
                pass
        for thread in self._threads:
            thread.join(5)
        self._threads = []

    def peer_allowed(self, sock):
        try:
            _pid, uid, gid = _UCRED.unpack(sock.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
        except OSError:
            return False
        if uid in (0, os.geteuid()):
            return True
        if self._gid is not None and gid == self._gid:
            return True
        LOG.warning('Refused a connection to the hook socket from uid '
                    '%(uid)d gid %(gid)d', {'uid': uid, 'gid': gid})
        return False

    # ------------------------------------------------------------ cache

    def _refresh_loop(self):
        delay = 0.0
        while not self._stopping.wait(delay):
            try:
                self.refresh()
            except Exception as exc:
                LOG.warning('Could not read from the conductor which '
                            'instances have leases (%s); trying again in '
                            '%d s', exc, REFRESH_RETRY)
                delay = REFRESH_RETRY
                continue
            if not self.refresh_interval:
                return
            delay = self.refresh_interval

    def refresh(self):
        since = time.monotonic()
        mapping = self.conductor.instance_leases(
            composable_context.get_admin_context(), self.host)
        self.cache.replace(mapping or {}, since)
        self._loaded.set()
        LOG.debug('%d instance(s) have leases reachable from %s',
                  self.cache.instances(), self.host)

    def leases_changed(self, instance_uuid, lease_uuids):
        """The conductor's push: the leases of one instance changed."""
        self.cache.set(instance_uuid, lease_uuids)

    # ------------------------------------------------------------ guests

    @contextlib.contextmanager
    def _held(self, instance_uuid, preparing=False):
        """libvirtd holds the domain for the length of the block (its
        hook is waiting for us)."""
        with self._lock:
            self._busy[instance_uuid] = self._busy.get(instance_uuid, 0) + 1
            if preparing:
                self._preparing[instance_uuid] = \
                    self._preparing.get(instance_uuid, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                for held in ((self._busy, self._preparing) if preparing
                             else (self._busy,)):
                    held[instance_uuid] -= 1
                    if not held[instance_uuid]:
                        del held[instance_uuid]

    def domain_busy(self, instance_uuid):
        """True while the libvirt hook of the domain waits for us: no
        libvirt call on it may be made now."""
        with self._lock:
            return instance_uuid in self._busy

    def defer_guest_attach(self, lease, extents, initiator_iqn,
                           instance_uuid):
        """Keep guest-mode extents for the ``started`` hook when the
        domain is being prepared (QEMU does not run yet). Returns the
        attach details to report, or None when not deferred."""
        with self._lock:
            if instance_uuid not in self._preparing:
                return None
            # A lease that grows while the domain is prepared adds its
            # new extents to those already waiting.
            pending = self._pending.setdefault(instance_uuid, {})
            waiting = pending.get(lease['uuid'], (None, [], None))[1]
            merged = {e['uuid']: e for e in waiting}
            merged.update((e['uuid'], e) for e in extents)
            pending[lease['uuid']] = (lease, list(merged.values()),
                                      initiator_iqn)
        LOG.info('Instance %(instance)s is starting: %(n)d extent(s) of '
                 'lease %(lease)s are exported to this host and go into '
                 'the guest once it runs',
                 {'instance': instance_uuid, 'n': len(extents),
                  'lease': lease['uuid']})
        return {e['uuid']: {'mode': states.ATTACH_GUEST,
                            'instance_uuid': instance_uuid,
                            'target_iqn': e.get('target_iqn'),
                            'lun': e.get('lun'), 'deferred': 'started'}
                for e in extents}

    def defer_guest_devices(self, lease, addresses, instance_uuid):
        """Keep the lease's functions ({device uuid: host PCI address})
        for the ``started`` hook when the domain is being prepared.
        Returns True when deferred."""
        with self._lock:
            if instance_uuid not in self._preparing:
                return False
            self._pending_devices.setdefault(instance_uuid, {})[
                lease['uuid']] = (lease, dict(addresses))
        LOG.info('Instance %(instance)s is starting: %(n)d device(s) of '
                 'lease %(lease)s are bound on this host and go into the '
                 'guest once it runs',
                 {'instance': instance_uuid, 'n': len(addresses),
                  'lease': lease['uuid']})
        return True

    def defer_virtio_mem(self, lease, spec, instance_uuid):
        """Keep the virtio-mem device of a lease (``spec``: the host
        ``nodes`` and ``size_mb``) for the ``started`` hook when the
        domain is being prepared. Returns True when deferred."""
        with self._lock:
            if instance_uuid not in self._preparing:
                return False
            self._pending_vmem.setdefault(instance_uuid, {})[
                lease['uuid']] = (lease, dict(spec))
        LOG.info('Instance %(instance)s is starting: the CXL memory of '
                 'lease %(lease)s is online on host NUMA node(s) %(nodes)s '
                 'and goes into the guest once it runs',
                 {'instance': instance_uuid, 'lease': lease['uuid'],
                  'nodes': spec['nodes']})
        return True

    def virtio_mem_pending(self, instance_uuid, lease_uuid):
        """Whether the lease's virtio-mem device waits for ``started``."""
        with self._lock:
            return lease_uuid in self._pending_vmem.get(instance_uuid, {})

    def grow_virtio_mem(self, lease_uuid, nodes, add_mb, instance_uuid):
        """An elastic lease grows while its device waits for ``started``:
        it will be plugged asking for ``add_mb`` more. Returns the spec
        then waiting, or None when none waits. Raises DriverError
        (nothing changed) when the new memory is on other host nodes or
        does not fit in the device."""
        with self._lock:
            waiting = self._pending_vmem.get(instance_uuid, {}).get(
                lease_uuid)
            if waiting is None:
                return None
            spec = waiting[1]
            other = sorted(set(int(n) for n in nodes) -
                           set(int(n) for n in spec['nodes']))
            if other:
                raise exception.DriverError(
                    reason='the new CXL memory of lease %s is online on '
                           'host NUMA node %d, but its virtio-mem device, '
                           'waiting to be plugged into instance %s, is '
                           'pinned to host node(s) %s; the lease cannot '
                           'grow there' % (
                               lease_uuid, other[0], instance_uuid,
                               ','.join(str(n) for n in spec['nodes'])))
            requested = spec.get('requested_mb', spec['size_mb'])
            if requested + int(add_mb) > spec['size_mb']:
                raise exception.DriverError(
                    reason='the virtio-mem device of lease %s waiting for '
                           'instance %s is %d MiB and %d MiB of it are '
                           'requested; it cannot take %d MiB more' % (
                               lease_uuid, instance_uuid, spec['size_mb'],
                               requested, add_mb))
            spec['requested_mb'] = requested + int(add_mb)
            answer = dict(spec)
        LOG.info('Instance %(instance)s is starting: the virtio-mem device '
                 'of lease %(lease)s will ask for %(req)d MiB',
                 {'instance': instance_uuid, 'lease': lease_uuid,
                  'req': answer['requested_mb']})
        return answer

    def shrink_virtio_mem(self, instance_uuid, lease_uuid, remove_mb):
        """Some chunks of an elastic lease go: a device waiting for
        ``started`` will ask for ``remove_mb`` less. True when that is
        all there is to do (it waits, or the domain is held by its hook,
        so no QEMU has the memory)."""
        with self._lock:
            waiting = self._pending_vmem.get(instance_uuid, {}).get(
                lease_uuid)
            if waiting is not None:
                spec = waiting[1]
                spec['requested_mb'] = max(
                    0, spec.get('requested_mb', spec['size_mb']) -
                    int(remove_mb))
                return True
            return instance_uuid in self._busy

    def forget_virtio_mem(self, instance_uuid, lease_uuid):
        """A virtio-mem detach: drop what waits for ``started``. Returns
        True when the domain is held by its hook (QEMU, and with it the
        guest's hold on the host node, is gone or not there yet)."""
        with self._lock:
            pending = self._pending_vmem.get(instance_uuid)
            if pending is not None:
                pending.pop(lease_uuid, None)
                if not pending:
                    del self._pending_vmem[instance_uuid]
            return instance_uuid in self._busy

    def forget_guest_devices(self, instance_uuid, lease_uuid):
        """A device detach: drop what waits for ``started``. Returns
        True when the domain is held by its hook, so there is no running
        guest to unplug from."""
        with self._lock:
            pending = self._pending_devices.get(instance_uuid)
            if pending is not None:
                pending.pop(lease_uuid, None)
                if not pending:
                    del self._pending_devices[instance_uuid]
            if (instance_uuid, lease_uuid) in self._plugging:
                self._plugging[(instance_uuid, lease_uuid)] = True
            return instance_uuid in self._busy

    def forget_guest(self, instance_uuid, lease_uuid, extents):
        """A guest-mode detach: drop what waits for ``started``. Returns
        True when the detach is done (the domain is held by its hook, so
        QEMU and its disks are gone, and only the libvirt secrets of the
        extents are removed, which needs no domain)."""
        gone = {e['uuid'] for e in extents}
        with self._lock:
            pending = self._pending.get(instance_uuid)
            if pending is not None and lease_uuid in pending:
                # A shrink takes some extents away: the others still wait.
                lease, waiting, initiator = pending[lease_uuid]
                waiting = [e for e in waiting if e['uuid'] not in gone]
                if waiting:
                    pending[lease_uuid] = (lease, waiting, initiator)
                else:
                    del pending[lease_uuid]
                if not pending:
                    del self._pending[instance_uuid]
            busy = instance_uuid in self._busy
        if not busy:
            return False
        attacher = self.node.guest_attacher
        for extent in extents:
            # Secrets are a libvirt object of their own: no domain lock.
            if attacher.remove_secret(extent['uuid']):
                LOG.info('Removed the libvirt secret of extent %s',
                         extent['uuid'])
        return True

    # ------------------------------------------------------------ requests

    def handle_line(self, line):
        try:
            request = wire.decode_line(line)
        except (ValueError, UnicodeDecodeError):
            return _refused('the request is not a JSON line')
        if not isinstance(request, dict):
            return _refused('the request is not a JSON object')
        return self.handle(request)

    def handle(self, request):
        self.requests += 1
        op = request.get('op')
        instance = request.get('instance')
        if not isinstance(instance, str) or not instance:
            return _refused('the request names no instance')
        request['instance'] = instance.lower()
        handler = {'prepare': self._prepare,
                   'started': self._started,
                   'stopped': self._stop,
                   'release': self._stop,
                   'reconnect': self._reconnect,
                   'migrate': self._migrate}.get(op)
        if handler is None:
            return _ok(message='nothing to do for %s' % op)
        try:
            return handler(request)
        except Exception as exc:
            LOG.exception('The libvirt hook %(op)s of instance %(instance)s '
                          'failed', {'op': op, 'instance': instance})
            return self._failure(request, 'the composable-agent failed '
                                          '(%s); see its log' %
                                 type(exc).__name__)

    @staticmethod
    def _policy(request):
        specs = request.get('specs') or {}
        return _FLAVOR_POLICY.get(specs.get('composable:on_bind_failure'),
                                  CONF.compute_node.hook_failure)

    def _failure(self, request, reason):
        instance = request.get('instance')
        if request.get('op') != 'prepare':
            return _refused('instance %s, %s: %s' % (
                instance, request.get('op'), reason))
        policy = self._policy(request)
        message = ('the composable leases of instance %s cannot be bound '
                   'to host %s: %s' % (instance, self.host, reason))
        if policy == ABORT:
            LOG.error('%s; the domain does not start', message)
            return _refused(message, abort=True)
        LOG.warning('%s; the domain starts without them', message)
        return _refused(message + '; the domain starts without them')

    def _known(self, instance):
        known = self.cache.leases_of(instance)
        if known is None and not self._loaded.is_set():
            self._loaded.wait(FIRST_LOAD_WAIT)
            known = self.cache.leases_of(instance)
        return known

    def _is_incoming(self, instance):
        with self._lock:
            stamp = self._incoming.get(instance)
            if stamp is not None and time.monotonic() - stamp > INCOMING_TTL:
                del self._incoming[instance]
                stamp = None
        return stamp is not None

    def _prepare(self, request):
        instance = request['instance']
        wants = bool(request.get('flavor_resources'))
        with self._lock:
            self._released.pop(instance, None)
            self._pending.pop(instance, None)
            self._pending_devices.pop(instance, None)
            self._pending_vmem.pop(instance, None)
        known = self._known(instance)
        if not wants and not known:
            if known is None:
                LOG.warning('Instance %s starts before this agent could '
                            'learn from the conductor which instances have '
                            'leases; it starts without any', instance)
                return _ok(leases=0, message='unknown; not waiting')
            LOG.debug('libvirt hook prepare: instance %s has no lease',
                      instance)
            return _ok(leases=0, message='no leases')
        timeout = CONF.compute_node.hook_prepare_timeout
        incoming = self._is_incoming(instance)
        LOG.info('Instance %(instance)s (domain %(domain)s) is starting: '
                 'binding its leases to %(host)s%(why)s',
                 {'instance': instance, 'domain': request.get('domain'),
                  'host': self.host,
                  'why': ' (its flavor asks for composable resources)'
                         if wants else ''})
        started = time.monotonic()
        with self._held(instance, preparing=True):
            try:
                specs = request.get('specs') or {}
                result = self.conductor.prepare_instance(
                    composable_context.get_admin_context(), instance,
                    self.host, project_id=request.get('project_id'),
                    user_id=request.get('user_id'),
                    flavor_resources=wants, wait=timeout,
                    incoming=incoming, rpc_timeout=timeout + RPC_MARGIN,
                    extra_specs={k: v for k, v in specs.items()
                                 if k.startswith('composable:')})
            except messaging.MessagingTimeout:
                return self._failure(
                    request, 'the composable-conductor did not answer '
                             'within %d s' % (timeout + RPC_MARGIN))
            except exception.ComposableException as exc:
                return self._failure(request, exc.message)
            except messaging.RemoteError as exc:
                return self._failure(
                    request, 'the composable-conductor failed (%s); see '
                             'its log' % exc.exc_type)
        leases = result.get('leases') or []
        self.cache.set(instance, [lease['uuid'] for lease in leases])
        if not result.get('ok'):
            return self._failure(request, result.get('message') or
                                 'unknown reason')
        LOG.info('Instance %(instance)s: %(n)d lease(s) bound to %(host)s '
                 'in %(secs).1f s', {'instance': instance,
                                     'n': len(leases), 'host': self.host,
                                     'secs': time.monotonic() - started})
        return _ok(leases=len(leases), message=result.get('message'))

    def _started(self, request):
        instance = request['instance']
        with self._lock:
            pending = self._pending.pop(instance, None)
            devices = self._pending_devices.pop(instance, None)
            vmem = self._pending_vmem.pop(instance, None)
            for lease_uuid in devices or ():
                self._plugging[(instance, lease_uuid)] = False
            incoming = self._incoming.pop(instance, None) is not None
        if pending or devices or vmem:
            self._spawn('hook-attach-%s' % instance[:8],
                        self._attach_pending, instance, pending or {},
                        time.monotonic(), devices or {}, vmem or {})
            return _ok(message='attaching in the background')
        if incoming:
            if self.cache.leases_of(instance):
                LOG.warning('Instance %s arrived by live migration; its '
                            'leases are bound to this host at its next '
                            'start', instance)
            return _ok()
        if self.cache.leases_of(instance) and self._guests_real():
            self._spawn('hook-check-%s' % instance[:8], self._ensure,
                        instance, 'started')
        return _ok()

    def _stop(self, request):
        instance = request['instance']
        op = request['op']
        with self._lock:
            self._pending.pop(instance, None)
            self._pending_devices.pop(instance, None)
            self._pending_vmem.pop(instance, None)
            self._incoming.pop(instance, None)
            done = self._released.get(instance)
            if op == 'release' and done is not None:
                del self._released[instance]
                if time.monotonic() - done < RELEASED_TTL:
                    return _ok(message='released at stopped')
        known = self.cache.leases_of(instance)
        if known == [] and not request.get('flavor_resources'):
            LOG.debug('libvirt hook %s: instance %s has no lease', op,
                      instance)
            return _ok(leases=0)
        timeout = CONF.compute_node.hook_release_timeout
        LOG.info('Instance %(instance)s stopped: unbinding its leases from '
                 '%(host)s', {'instance': instance, 'host': self.host})
        with self._held(instance):
            try:
                result = self.conductor.release_instance(
                    composable_context.get_admin_context(), instance,
                    self.host, wait=timeout,
                    rpc_timeout=timeout + RPC_MARGIN)
            except Exception as exc:
                reason = getattr(exc, 'message', None) or \
                    type(exc).__name__
                LOG.error('Could not unbind the leases of instance '
                          '%(instance)s from %(host)s: %(reason)s',
                          {'instance': instance, 'host': self.host,
                           'reason': reason})
                return _refused('the leases of instance %s could not be '
                                'unbound from %s: %s' % (instance,
                                                         self.host, reason))
        leases = result.get('leases') or []
        self.cache.set(instance, [lease['uuid'] for lease in leases])
        if not result.get('ok'):
            LOG.error('Instance %(instance)s: %(message)s',
                      {'instance': instance,
                       'message': result.get('message')})
            return _refused(result.get('message') or 'unbinding failed')
        if op == 'stopped':
            with self._lock:
                self._released[instance] = time.monotonic()
        return _ok(leases=len(leases))

    def _reconnect(self, request):
        instance = request['instance']
        if self.cache.leases_of(instance) and self._guests_real():
            self._spawn('hook-check-%s' % instance[:8], self._ensure,
                        instance, 'reconnect')
        return _ok()

    def _migrate(self, request):
        """An incoming live migration. Refused (the migration fails, the
        guest runs on where it is) when the instance holds what cannot
        follow it: passed-through fabric devices, or guest-mode memory
        (its disk is an iSCSI session of the source's QEMU)."""
        instance = request['instance']
        with self._lock:
            self._incoming[instance] = time.monotonic()
        try:
            leases = self.conductor.instance_status(
                composable_context.get_admin_context(), instance, self.host)
        except Exception as exc:
            LOG.warning('Could not check the leases of instance %(instance)s '
                        'arriving by live migration: %(exc)s',
                        {'instance': instance, 'exc': exc})
            return _ok()
        rule = _live_migration()
        reasons = []
        for lease in leases:
            why = rule.summary_cannot_follow(lease)
            if why:
                reasons.append('%s (lease %s)' % (why, lease['uuid']))
        if not reasons:
            return _ok()
        message = ('composable refuses the live migration of instance %s '
                   'to %s: %s' % (instance, self.host,
                                  rule.refusal(instance, reasons)))
        LOG.error(message)
        with self._lock:
            self._incoming.pop(instance, None)
        return _refused(message, abort=True)

    # ------------------------------------------------------------ threads

    def _attach_pending(self, instance, pending, since, devices=None,
                        vmem=None):
        """started: hot-plug what prepare exported or bound. On failure
        the lease is unbound (it stays the instance's) with the reason as
        its fault."""
        self._attach_pending_memory(instance, pending, since)
        if vmem:
            self._attach_pending_vmem(instance, vmem, since)
        if devices:
            self._attach_pending_devices(instance, devices, since)

    def _attach_pending_vmem(self, instance, vmem, since):
        attacher = self.node.virtio_mem_attacher
        for lease_uuid, (lease, spec) in vmem.items():
            reason = self._plug_with_retries(
                instance, since,
                lambda: attacher.attach(
                    instance, lease_uuid, spec['nodes'], spec['size_mb'],
                    requested_mib=spec.get('requested_mb')),
                'Plugging the virtio-mem device of lease %s into instance '
                '%s' % (lease_uuid, instance),
                # A domain without <maxMemory> stays without it.
                virtio_mem.NoMaxMemory)
            if reason is _STOPPED:
                return
            if reason is None or self._stopped_since(instance, since):
                continue
            self._unbind_after_failed_plug(
                instance, lease_uuid,
                'The guest did not get the CXL memory of this lease when '
                'instance %s started on %s: %s' % (instance, self.host,
                                                   reason))

    def _plug_with_retries(self, instance, since, plug, what, lasting):
        """Call ``plug()`` up to ATTACH_ATTEMPTS times while the domain
        runs: None once it worked, _STOPPED when the domain stopped
        first, else the reason of the last failure. A failure of class
        ``lasting`` is not tried again (no retry mends it), nor is any
        once the agent is stopping."""
        reason = None
        for attempt in range(ATTACH_ATTEMPTS):
            if self._stopped_since(instance, since):
                return _STOPPED
            try:
                plug()
            except Exception as exc:
                reason = getattr(exc, 'message', None) or \
                    type(exc).__name__
                LOG.warning('%(what)s failed (attempt %(n)d): %(reason)s',
                            {'what': what, 'n': attempt + 1,
                             'reason': reason})
                if isinstance(exc, lasting) or \
                        self._stopping.wait(ATTACH_RETRY_DELAY):
                    break
                continue
            return None
        return reason

    def _attach_pending_devices(self, instance, devices, since):
        try:
            for lease_uuid, (lease, addresses) in devices.items():
                if not self._attach_lease_devices(instance, lease_uuid,
                                                  addresses, since):
                    return
        finally:
            with self._lock:
                for lease_uuid in devices:
                    self._plugging.pop((instance, lease_uuid), None)

    def _cancelled(self, instance, lease_uuid):
        with self._lock:
            return self._plugging.get((instance, lease_uuid), False)

    def _attach_lease_devices(self, instance, lease_uuid, addresses, since):
        """One lease's devices; False when the domain stopped."""
        attacher = self.node.device_attacher

        def still_wanted():
            return not self._cancelled(instance, lease_uuid)

        reason = self._plug_with_retries(
            instance, since,
            lambda: attacher.attach(instance, lease_uuid, addresses,
                                    still_wanted=still_wanted),
            'Hot-plug of the devices of lease %s into instance %s' % (
                lease_uuid, instance),
            # No slot stays no slot: no point in asking again.
            hostdev.NoHotplugSlot)
        if reason is _STOPPED:
            return False
        if reason is None or self._stopped_since(instance, since) or \
                self._cancelled(instance, lease_uuid):
            return True
        self._unbind_after_failed_plug(
            instance, lease_uuid,
            'The guest did not get the devices of this lease when '
            'instance %s started on %s: %s' % (instance, self.host, reason))
        return True

    def _unbind_after_failed_plug(self, instance, lease_uuid, fault):
        try:
            self.conductor.release_instance(
                composable_context.get_admin_context(), instance,
                self.host, wait=CONF.compute_node.hook_release_timeout,
                leases=[lease_uuid], fault=fault,
                rpc_timeout=(CONF.compute_node.hook_release_timeout +
                             RPC_MARGIN))
        except Exception:
            LOG.exception('Could not unbind lease %s after its failed '
                          'hot-plug', lease_uuid)

    def _attach_pending_memory(self, instance, pending, since):
        if not pending:
            return
        attacher = self.node.guest_attacher
        for lease_uuid, (lease, extents, initiator) in pending.items():
            reason = None
            for attempt in range(ATTACH_ATTEMPTS):
                if self._stopped_since(instance, since):
                    return
                try:
                    details = attacher.attach(instance, extents, initiator,
                                              lease_uuid=lease_uuid)
                except Exception as exc:
                    reason = getattr(exc, 'message', None) or \
                        type(exc).__name__
                    LOG.warning('Hot-plug of lease %(lease)s into instance '
                                '%(instance)s failed (attempt %(n)d): '
                                '%(reason)s', {'lease': lease_uuid,
                                               'instance': instance,
                                               'n': attempt + 1,
                                               'reason': reason})
                    if self._stopping.wait(ATTACH_RETRY_DELAY):
                        return
                    continue
                self.node.attachments.memory_attached(
                    lease_uuid, details,
                    dict(lease, attach_mode=states.ATTACH_GUEST,
                         instance_uuid=instance))
                reason = None
                break
            if reason is None or self._stopped_since(instance, since):
                continue
            self._unbind_after_failed_plug(
                instance, lease_uuid,
                'The guest did not get the memory of this lease when '
                'instance %s started on %s: %s' % (instance, self.host,
                                                   reason))

    def _stopped_since(self, instance, since):
        """True when the domain stopped (its stop hook runs, or ran)
        since ``since``."""
        with self._lock:
            stopping = (instance in self._busy and
                        instance not in self._preparing)
            stamp = self._released.get(instance)
            return stopping or (stamp is not None and stamp >= since)

    def _ensure(self, instance, why):
        """The guest-mode leases of the instance bound here have their
        disks in the domain, and its device leases their devices; those
        that do not are bound again."""
        ctx = composable_context.get_admin_context()
        try:
            leases = self.conductor.instance_status(ctx, instance, self.host)
            here = [lease for lease in leases
                    if lease['status'] == states.BOUND and
                    lease.get('host') == self.host]
            # Simulated memory or devices are in no guest: nothing to
            # look for.
            missing = [lease['uuid'] for lease in here
                       if not self.node.memory_simulated and
                       lease.get('attach_mode') == states.ATTACH_GUEST and
                       lease.get('extents') and
                       not self._disks_present(instance,
                                               lease.get('extents') or [])]
            missing += [lease['uuid'] for lease in here
                        if not self.node.cxl_simulated and
                        lease.get('attach_mode') ==
                        states.ATTACH_VIRTIO_MEM and
                        lease.get('extents') and
                        not self.node.virtio_mem_attacher.present(
                            instance, lease['uuid'])]
            missing += [lease['uuid'] for lease in here
                        if not self.node.devices_simulated and
                        lease.get('devices') and
                        lease['uuid'] not in missing and
                        not self._devices_present(instance,
                                                  lease['devices'])]
        except Exception as exc:
            LOG.warning('Could not check the leases of instance '
                        '%(instance)s after %(why)s: %(exc)s',
                        {'instance': instance, 'why': why, 'exc': exc})
            return
        if not missing:
            return
        LOG.warning('Instance %(instance)s (%(why)s) lacks the disks or '
                    'devices of its lease(s) %(leases)s; binding them again',
                    {'instance': instance, 'why': why,
                     'leases': ', '.join(missing)})
        wait = CONF.compute_node.hook_prepare_timeout
        try:
            self.conductor.release_instance(
                ctx, instance, self.host, wait=wait, leases=missing,
                rpc_timeout=wait + RPC_MARGIN)
            # The domain runs now: the bind flow hot-plugs directly.
            self.conductor.prepare_instance(
                ctx, instance, self.host, wait=wait, leases=missing,
                rpc_timeout=wait + RPC_MARGIN)
        except Exception:
            LOG.exception('Could not bind the leases of instance %s again',
                          instance)

    def _guests_real(self):
        """Whether guest-mode memory, virtio-mem memory or devices
        really go into guests on this host (else there is nothing to
        check in a domain)."""
        return not (self.node.memory_simulated and
                    self.node.devices_simulated and
                    self.node.cxl_simulated)

    def _devices_present(self, instance, device_uuids):
        present = self.node.device_attacher.present(instance, device_uuids)
        return set(device_uuids) <= present

    def _disks_present(self, instance, extent_uuids):
        attacher = self.node.guest_attacher
        domain = attacher.domain(instance, missing_ok=True)
        if domain is None or not domain.isActive():
            return True
        disks = libvirt_guest.live_disks(domain.XMLDesc(0))
        return all(libvirt_guest.find_disk(disks, {'uuid': uuid})
                   for uuid in extent_uuids)
