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

"""The conductor RPC endpoint: the only writer of lease state.

Each RPC method takes the lease's reservation, checks and makes the state
change the caller asked for (a refused transition is a 409 with a hint),
all in a task (composable.conductor.task), and returns; the slow part
(exports, attaches, fabric, scrubbing) runs in a worker thread that keeps
the reservation until it is done. Lease creation is the exception: it
allocates before answering, so the API can return the lease as reserved
or alloc_failed at once.

Exceptions raised here cross RPC to composable-api, so they are all
composable.common.exception types (listed in allowed_remote_exmods).
"""

from concurrent import futures
import threading

from oslo_db import exception as db_exc
from oslo_log import log as logging
import oslo_messaging as messaging
from oslo_utils import timeutils

from composable.common import context as composable_context
from composable.common import exception
from composable.common import media
from composable.common import pool_fit
from composable.common import states
from composable.common import utils
from composable.conductor.allocator import batches as claim_batches
from composable.conductor.allocator import claims as allocator
from composable.conductor.elastic import resizer as elastic_resizer
from composable.conductor.elastic import usage as lease_usage
from composable.conductor import device_reports
from composable.conductor import fabric_sync
from composable.conductor import flows as lease_flows
from composable.conductor import guest_swap
from composable.conductor import host_facts
from composable.conductor import node_reports
from composable.conductor.nova import client as nova_api
from composable.conductor.nova import events as nova_events
from composable.conductor import periodic
from composable.conductor.placement import claims as placement_claims
from composable.conductor.placement import host_memory
from composable.conductor import reconciler
from composable.conductor import rules
from composable.conductor import task as lease_task
from composable import conf
from composable.db import allocation
from composable.db import api as db_api
from composable.db import views

CONF = conf.CONF
LOG = logging.getLogger(__name__)

# Fields of a lease the API may set at creation (see ConductorAPI).
_CREATE_FIELDS = frozenset([
    'uuid', 'name', 'description', 'project_id', 'user_id', 'memory_mb',
    'device_count', 'device_kind', 'device_model', 'device_traits',
    'requested_pools', 'requested_devices', 'attach_mode', 'start_at',
    'end_at', 'elastic'])

_EXPECTED = messaging.expected_exceptions(
    exception.Invalid, exception.NotFound, exception.Conflict)

# Fields of a lease update_lease changes under the lease's reservation.
_UPDATE_FIELDS = db_api.LEASE_EDITABLE_FIELDS


def _parse_time(value, field):
    if value is None or value == '':
        return None
    if isinstance(value, str):
        try:
            value = timeutils.parse_isotime(value)
        except ValueError:
            raise exception.Invalid(
                reason='%s is not an ISO 8601 time: %s' % (field, value))
    return utils.to_naive_utc(value).replace(microsecond=0)


class ConductorManager(object):

    # 1.1: report_lease_usage
    # 1.2: report_devices_restored
    # 1.3: host_memory_leases
    # 1.4: report_host_facts
    # 1.5: update_lease changes name and description too
    # 1.6: report_memory_restored
    # 1.7: report_guest_swap
    target = messaging.Target(version='1.7')

    def __init__(self, host, agent_api=None):
        self.host = host
        self.flows = lease_flows.LeaseFlows(host, agent_api=agent_api)
        self.periodic = periodic.PeriodicTasks(self)
        self.claims = claim_batches.ClaimBatcher()
        self._executor = futures.ThreadPoolExecutor(
            max_workers=CONF.conductor.workers,
            thread_name_prefix='conductor-worker')
        self._futures = set()
        self._futures_lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads = []
        self._nova_listener = None
        self.resizer = elastic_resizer.ElasticResizer(self)

    # ------------------------------------------------------------ life

    def start(self):
        """Register this conductor and start its heartbeat and periodic
        threads. The first heartbeat is written before returning, so the
        reservations this conductor takes are never mistaken for a dead
        conductor's."""
        admin = composable_context.get_admin_context()
        # A conductor restarted under the same name faster than the
        # heartbeat timeout would otherwise keep the reservations of its
        # previous life forever (they look alive): a new process holds
        # none, so drop them; the periodic tasks resume those leases.
        db_api.conductor_offline(admin, self.host)
        db_api.conductor_heartbeat(admin, self.host)
        self._stopping.clear()
        self.claims.start()
        loops = [('heartbeat', CONF.conductor.heartbeat_interval,
                  self._heartbeat),
                 ('periodic', CONF.conductor.periodic_interval,
                  self.run_periodic_tasks)]
        if CONF.conductor.node_check_interval:
            loops.append(('node-check', CONF.conductor.node_check_interval,
                          self._check_memory_nodes))
        if CONF.conductor.reconcile_interval:
            loops.append(('reconcile', CONF.conductor.reconcile_interval,
                          reconciler.Reconciler(self).run))
        if CONF.conductor.fabric_sync_interval:
            loops.append(('fabric-sync', CONF.conductor.fabric_sync_interval,
                          fabric_sync.FabricSync(self.host).run))
        loops.extend(placement_claims.loops(self))
        if CONF.elastic.prune_interval:
            loops.append(('usage-prune', CONF.elastic.prune_interval,
                          self.prune_usage))
        if CONF.elastic.resize_interval:
            loops.append(('elastic-resize', CONF.elastic.resize_interval,
                          self.resize_elastic_leases))
        for name, interval, fn in loops:
            thread = threading.Thread(target=self._loop,
                                      args=(name, interval, fn),
                                      name='conductor-%s' % name,
                                      daemon=True)
            thread.start()
            self._threads.append(thread)
        if CONF.nova.notifications_enabled:
            self._nova_listener = nova_events.NovaNotificationListener(self)
            self._nova_listener.start()
        LOG.info('Conductor %s started', self.host)

    def stop(self):
        """Stop the loops, let running flows finish, then go offline
        (which also drops any reservation left)."""
        if self._nova_listener is not None:
            # No new Nova events once the workers are shutting down.
            self._nova_listener.stop()
            self._nova_listener = None
        self._stopping.set()
        self.claims.stop()
        for thread in self._threads:
            thread.join()
        self._threads = []
        self._executor.shutdown(wait=True)
        try:
            db_api.conductor_offline(composable_context.get_admin_context(),
                                     self.host)
        except Exception:
            LOG.exception('Could not mark conductor %s offline', self.host)
        LOG.info('Conductor %s stopped', self.host)

    def _loop(self, name, interval, fn):
        while not self._stopping.wait(interval):
            try:
                fn()
            except Exception:
                LOG.exception('Conductor %s task failed', name)

    def _check_memory_nodes(self):
        # Safe on several conductors at once: scrubbing an orphan file is
        # idempotent, and files of live extents are never touched.
        node_reports.check_memory_nodes(
            composable_context.get_admin_context(), self.flows.agents)

    def _heartbeat(self):
        db_api.conductor_heartbeat(composable_context.get_admin_context(),
                                   self.host)

    def prune_usage(self):
        return lease_usage.prune(composable_context.get_admin_context())

    def resize_elastic_leases(self):
        return self.resizer.run(composable_context.get_admin_context())

    def run_periodic_tasks(self):
        self.periodic.run_all(composable_context.get_admin_context())

    def spawn(self, reservation, fn, *args, **kwargs):
        """Run a flow in a worker thread that keeps ``reservation`` until
        the flow ends."""
        future = reservation.hand_off(self._executor, fn, *args, **kwargs)
        with self._futures_lock:
            self._futures.add(future)
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future):
        with self._futures_lock:
            self._futures.discard(future)

    def wait_for_workers(self, timeout=None):
        """Wait until no flow runs (tests, shutdown). True if idle."""
        with self._futures_lock:
            running = list(self._futures)
        done, not_done = futures.wait(running, timeout=timeout)
        return not not_done

    # ------------------------------------------------------------ helpers

    @staticmethod
    def _admin():
        return composable_context.get_admin_context()

    def _create_values(self, context, values):
        values = dict(values or {})
        unknown = set(values) - _CREATE_FIELDS
        if unknown:
            raise exception.Invalid(
                reason='unknown lease fields: %s' %
                ', '.join(sorted(unknown)))
        values = {k: v for k, v in values.items() if v is not None}
        values.setdefault('project_id', context.project_id)
        values.setdefault('user_id', context.user_id)
        if not values.get('project_id'):
            raise exception.Invalid(reason='a lease needs a project')
        for field in ('start_at', 'end_at'):
            if field in values:
                values[field] = _parse_time(values[field], field)
        # The API checked that end_at is after start_at; whether it is
        # still ahead is for the moment the lease is written.
        end_at = values.get('end_at')
        if end_at is not None and end_at <= utils.utcnow():
            raise exception.Invalid(
                "Invalid input for field 'end_at': %s is not in the future"
                % utils.isotime(end_at))
        devices = values.get('requested_devices') or []
        if devices and not values.get('device_count'):
            values['device_count'] = len(devices)
        if not (values.get('memory_mb') or values.get('device_count')):
            raise exception.Invalid(
                reason='ask for memory_mb, device_count or device_uuids')
        return values

    def _check_requested(self, context, values):
        """Refuse pools gone since the API looked them up and devices no
        longer free before anything is created; the pools named."""
        admin = self._admin()
        pools = []
        for pool in values.get('requested_pools') or []:
            try:
                pools.append(db_api.pool_get(admin, pool))
            except exception.PoolNotFound:
                raise exception.Invalid(reason='pool %s does not exist' %
                                        pool)
        devices = values.get('requested_devices') or []
        if devices:
            allocation.check_requested_devices(
                admin, devices, project_id=values.get('project_id'))
        return pools

    # ------------------------------------------------------------ RPC API
    # Refusals are answers, not server errors: oslo.messaging logs these
    # without a traceback.

    @_EXPECTED
    def create_lease(self, context, values, check_fit=True):
        """Create a lease; its document (composable.db.views).

        A request no pool could ever hold is refused (Invalid, nothing
        created): one that names no pools or devices on the pool rows its
        claim reads, the others here (see composable.common.pool_fit).
        Without ``check_fit`` it is created in alloc_failed instead.
        """
        values = self._create_values(context, values)
        # The name a lease is given through the API is the project's for
        # as long as the lease lives (the unique constraint on live_name
        # settles two creates racing for it).
        values['live_name'] = values.get('name')
        try:
            return self._create_lease(context, values, check_fit)
        except db_exc.DBDuplicateEntry as exc:
            if 'live_name' not in (exc.columns or []):
                raise
            raise exception.NameInUse(name=values['name'])

    def _create_lease(self, context, values, check_fit):
        pools = self._check_requested(context, values)
        named = bool(pools or values.get('requested_devices'))
        if values.get('elastic'):
            self._check_elastic(values, pools)
        start_at = values.get('start_at')
        if check_fit and named:
            self._check_fit(values, pools)
        document = None
        if start_at is None or start_at <= utils.utcnow():
            uuid, document = self._create_and_allocate(
                context, values, check_fit and not named)
        else:
            if check_fit and not named:
                self._check_fit(values)
            values['status'] = states.REQUESTED
            lease = db_api.lease_create(context, values, action='create')
            db_api.action_finish(
                context, lease.id, 'create', 'success',
                message='The lease starts at %s; it is allocated then.' %
                utils.isotime(start_at))
            uuid = lease.uuid
        if document is None:
            document = views.lease_document(
                db_api.lease_get(self._admin(), uuid, for_view=True))
        return document

    def _check_elastic(self, values, pools):
        """Refuse an elastic lease no memory pool (among those it names)
        could hold at its minimum, or take in whole extents between its
        minimum and maximum."""
        policy = values['elastic']
        for pool in pools or []:
            # A CXL pool (named: CXL memory is only had by naming it)
            # resizes through virtio-mem, on a fabric composing nothing.
            if pool.kind == 'memory' and media.is_cxl(pool):
                refusal = rules.elastic_cxl_refusal(
                    pool, values.get('attach_mode') or states.ATTACH_HOST,
                    policy)
                if refusal:
                    raise exception.Invalid(refusal)
        candidates = [p for p in pools or db_api.pool_summaries(
            self._admin(), kind='memory') if p.kind == 'memory']
        reasons = []
        for pool in candidates:
            step = pool.step_size or 1
            sizes = (values.get('memory_mb') or 0, policy['min_mb'],
                     policy['max_mb'])
            if any(size % step for size in sizes):
                reasons.append('%s takes multiples of %d MiB' %
                               (pool.name, step))
            elif pool.total < policy['min_mb']:
                reasons.append('%s holds %d MiB in all' % (pool.name,
                                                           pool.total))
            else:
                return
        raise exception.Invalid(
            "Invalid input for field 'elastic': no memory pool%s can hold "
            "an elastic lease of %d to %d MiB starting at %d MiB%s" % (
                ' among those asked for' if pools else '',
                policy['min_mb'], policy['max_mb'],
                values.get('memory_mb') or 0,
                ': ' + '; '.join(reasons) if reasons else ''))

    def _check_fit(self, values, pools=None):
        """Refuse a request none of ``pools`` (the pools it names, else
        every pool) could ever hold."""
        if not pools:
            pools = db_api.pool_summaries(self._admin())
        if values.get('device_count'):
            pool_fit.check_devices(values['device_count'],
                                   values.get('device_kind') or 'gpu', pools)
        if values.get('memory_mb'):
            pool_fit.check_memory(values['memory_mb'], pools)

    def _create_and_allocate(self, context, values, check_fit=False):
        # Insert and claim in one transaction (the allocator's): no one can
        # see the lease before it is reserved or alloc_failed, so it needs
        # no reservation, and a request error leaves nothing behind.
        placement = placement_claims.enabled()
        if placement:
            # Inserted under this conductor's reservation until the
            # Placement claim is settled (see placement_claims).
            values = placement_claims.prepare_create(values, self.host)
        uuid, status, document = self.claims.create(context, values,
                                                    action='create',
                                                    check_fit=check_fit)
        if status == states.ALLOC_FAILED and values.get('requested_devices'):
            # Lost a race for a device picked by uuid: the same answer as
            # when it was taken before the request, and nothing created.
            try:
                allocation.check_requested_devices(
                    self._admin(), values['requested_devices'],
                    project_id=values.get('project_id'))
            except (exception.Invalid, exception.NotFound,
                    exception.Conflict):
                db_api.lease_purge(self._admin(),
                                   db_api.lease_get(self._admin(), uuid).id)
                raise
        if placement:
            # The claim in Placement may have rolled the lease back: its
            # document is read again then.
            if placement_claims.after_create(context, uuid, status,
                                             self.host) != status:
                document = None
        return uuid, document

    @_EXPECTED
    def bind_lease(self, context, lease_uuid, host_uuid, instance_uuid=None,
                   attach_mode=None):
        # Identity only here: the lease is read whole under its
        # reservation, where the rules of a bind are checked on it.
        lease = db_api.lease_ref(context, lease_uuid)
        if instance_uuid and nova_api.configured():
            # Where the server runs, and whether it is the lease's
            # project's, is Nova's to say.
            host_uuid = nova_api.host_for_bind(context, lease, host_uuid,
                                               instance_uuid)
        if not host_uuid:
            raise exception.Invalid(
                reason='give the host to bind to (or a server, with '
                       '[nova] configured, to bind where it runs)')
        try:
            host = db_api.host_get(self._admin(), host_uuid)
        except exception.HostNotFound:
            raise exception.Invalid(reason='host %s does not exist' %
                                    host_uuid)
        if attach_mode is not None and attach_mode not in states.ATTACH_MODES:
            raise exception.Invalid(reason='attach_mode must be %s' %
                                    ' or '.join(states.ATTACH_MODES))
        with lease_task.acquire(context, lease.id, self.host,
                                lease_ident=lease.uuid) as task:
            mode = attach_mode or task.lease.attach_mode
            rules.check_attach_mode(mode, instance_uuid)
            rules.check_cxl_host_mode(task.lease, mode)
            rules.check_elastic_cxl_mode(task.lease, mode)
            lease_task.check_event(task.lease, states.BIND, 'bind')
            rules.check_fabric(task.lease, host)
            rules.check_sriov_host(task.lease, host)
            # Devices the host cannot reach (the fabric's zones) are
            # traded for ones it can, or the bind is refused (409) here,
            # not when the fabric refuses it minutes later. A lease
            # without devices (read under its reservation, where they do
            # not change) has none to trade: no transaction for it.
            traded = (allocator.reach_host(context, lease.id, host.name)
                      if task.lease.devices else {})
            if traded:
                task.mark_stale()
                LOG.info('Lease %(lease)s: devices %(old)s cannot be '
                         'reached from host %(host)s; the lease now holds '
                         '%(new)s instead',
                         {'lease': lease.uuid,
                          'old': ', '.join(sorted(traded)),
                          'host': host.name,
                          'new': ', '.join(traded[k]
                                           for k in sorted(traded))})
            # The flow goes on with the row the task holds, moved to
            # binding with these values and the host read above.
            task.process_event(
                states.BIND, request='bind', action='bind',
                values={'host_id': host.id, 'instance_uuid': instance_uuid,
                        'attach_mode': mode, 'fault': None}, host=host)
            task.spawn_after(self.spawn, self.flows.bind, task,
                             action='bind')
        return lease.uuid

    @_EXPECTED
    def unbind_lease(self, context, lease_uuid):
        lease = db_api.lease_get(context, lease_uuid)
        with lease_task.acquire(context, lease.id, self.host,
                                lease_ident=lease.uuid) as task:
            lease_task.check_event(task.lease, states.UNBIND, 'unbind')
            self._take_host_memory_back(context, task, states.UNBIND,
                                        'unbind', 'unbind')
            task.spawn_after(self.spawn, self.flows.unbind, task,
                             action='unbind')
        return lease.uuid

    @staticmethod
    def _take_host_memory_back(context, task, event, request, action):
        """CXL memory bound in host mode: refuse (409, nothing changed)
        when instances on the compute node use it, else lower its
        MEMORY_MB before the state change (rules.check_cxl_unbind under
        the reservation, see composable.conductor.placement.host_memory).
        The flow gives it back if the memory stays."""
        host_memory.take_back(context, task.lease)
        try:
            task.process_event(event, request=request, action=action)
        except Exception:
            host_memory.give_back(context, task.lease)
            raise

    @_EXPECTED
    def delete_lease(self, context, lease_uuid):
        # Identity and state only: the short path needs no more, and the
        # full flow re-reads the lease under its reservation.
        lease, released = self.claims.release(context, lease_uuid,
                                              'delete')
        if released:
            # Never bound and not busy: released in one transaction, with
            # nothing to ask of any agent or fabric.
            if placement_claims.enabled():
                placement_claims.release(lease.uuid)
            return lease.uuid
        with lease_task.acquire(context, lease.id, self.host,
                                lease_ident=lease.uuid) as task:
            lease_task.check_event(task.lease, states.DELETE, 'delete')
            action = 'delete'
            start = action
            if task.lease.status == states.RELEASING:
                # Resuming a release nobody works on: finish its action.
                action = periodic.running_action(context, lease.id,
                                                 'delete')
                start = None
            self._take_host_memory_back(context, task, states.DELETE,
                                        'delete', start)
            task.spawn_after(self.spawn, self.flows.release, task,
                             action=action)
        return lease.uuid

    @_EXPECTED
    def update_lease(self, context, lease_uuid, values):
        """Change what a user edits of the lease (name, description,
        end_at) under its reservation, in one write: the fields all land
        or none does, and the end never races the lease's expiry
        (periodic.expire): the lease either ends first (InvalidState) or
        its new end holds. 1.0 changes end_at only; 1.5 name and
        description too."""
        values = dict(values or {})
        unknown = set(values) - _UPDATE_FIELDS
        if unknown:
            raise exception.Invalid(
                reason='update_lease changes only %s, not %s' %
                (', '.join(sorted(_UPDATE_FIELDS)),
                 ', '.join(sorted(unknown))))
        if 'end_at' in values:
            values['end_at'] = _parse_time(values['end_at'], 'end_at')
        lease = db_api.lease_ref(context, lease_uuid)
        with lease_task.acquire(context, lease.id, self.host,
                                lease_ident=lease.uuid) as task:
            task.edit(**values)
        return lease.uuid

    def report_lease_usage(self, context, host, samples):
        """Store usage samples of the memory leases bound on ``host`` (a
        cast from that host's agent); see
        composable.conductor.elastic.usage."""
        try:
            return lease_usage.record(self._admin(), host, samples)
        except Exception:
            # A cast: nobody would see the error; the next report brings
            # new samples.
            LOG.exception('Could not store the usage report of host %s',
                          host)
            return 0

    def report_devices_restored(self, context, host, results):
        """Note on each lease bound on ``host`` what its agent did to the
        lease's devices after the host restarted (a cast from that agent);
        see composable.conductor.device_reports."""
        try:
            return device_reports.record_restored(self._admin(), host,
                                                  results)
        except Exception:
            # A cast: nobody would see the error; the agent logged what
            # it did too.
            LOG.exception('Could not note the device report of host %s',
                          host)
            return []

    def report_memory_restored(self, context, host, results):
        """Note on each lease bound on ``host`` the CXL memory its agent
        put online again after the host restarted (a cast from that
        agent); see composable.conductor.device_reports."""
        try:
            return device_reports.record_memory_restored(
                self._admin(), host, results)
        except Exception:
            # A cast: nobody would see the error; the agent logged it.
            LOG.exception('Could not note the memory report of host %s',
                          host)
            return []

    def report_guest_swap(self, context, host, lease_uuid, instance_uuid,
                          outcome):
        """Note how the guest of ``instance_uuid`` made the disks of a
        guest-mode lease swap after its bind answered (a cast from the
        agent of ``host``); see composable.conductor.guest_swap. A report
        that came before the bind recorded the disks is tried again a
        few times, from a timer."""
        return self._note_guest_swap(host, lease_uuid, instance_uuid,
                                     outcome, 0)

    def _note_guest_swap(self, host, lease_uuid, instance_uuid, outcome,
                         attempt):
        try:
            noted = guest_swap.record(self._admin(), host, lease_uuid,
                                      instance_uuid, outcome)
        except Exception:
            # A cast: nobody would see the error; the agent logged it.
            LOG.exception('Could not note the guest swap report of lease '
                          '%s', lease_uuid)
            return None
        if noted != guest_swap.EARLY:
            return noted
        if attempt >= len(guest_swap.RETRY_DELAYS) or \
                self._stopping.is_set():
            LOG.info('Dropped the guest swap report of lease %(lease)s '
                     'from host %(host)s: the bind never recorded its '
                     'disks', {'lease': lease_uuid, 'host': host})
            return guest_swap.DROPPED
        timer = threading.Timer(
            guest_swap.RETRY_DELAYS[attempt], self._note_guest_swap,
            args=(host, lease_uuid, instance_uuid, outcome, attempt + 1))
        timer.daemon = True
        timer.name = 'conductor-guest-swap-retry'
        timer.start()
        return noted

    def report_host_facts(self, context, host, facts):
        """Keep what the agent of ``host`` reported of its machine (a
        cast from that agent); see composable.conductor.host_facts."""
        try:
            return host_facts.record(self._admin(), host, facts)
        except Exception:
            # A cast: nobody would see the error.
            LOG.exception('Could not note the facts host %s reported',
                          host)
            return False

    def sync_pool_placement(self, context, pool_uuid, provider_uuid=None):
        """Bring one pool's resource provider up to date in Placement (a
        cast from composable-api after it changed the pool)."""
        placement_claims.sync_pool_now(pool_uuid, provider_uuid)

    # ------------------------------------------------------ libvirt hook
    # For the agents of compute nodes (composable.agent.hook_server); the
    # work is in composable.conductor.nova.binding.

    @property
    def instance_binding(self):
        if getattr(self, '_instance_binding', None) is None:
            from composable.conductor.nova import binding as instance_binding
            self._instance_binding = instance_binding.InstanceBinding(self)
        return self._instance_binding

    @_EXPECTED
    def instance_leases(self, context, host):
        return self.instance_binding.instance_leases(host)

    @_EXPECTED
    def instance_status(self, context, instance_uuid, host=None):
        return self.instance_binding.instance_status(instance_uuid, host)

    @_EXPECTED
    def host_memory_leases(self, context, host):
        return self.instance_binding.host_memory_leases(host)

    @_EXPECTED
    def prepare_instance(self, context, instance_uuid, host, project_id=None,
                         flavor_resources=False, wait=0, incoming=False,
                         leases=None, user_id=None, extra_specs=None):
        return self.instance_binding.prepare(
            instance_uuid, host, project_id=project_id,
            flavor_resources=flavor_resources, wait=wait, incoming=incoming,
            leases=leases, user_id=user_id, extra_specs=extra_specs)

    @_EXPECTED
    def release_instance(self, context, instance_uuid, host, wait=0,
                         leases=None, fault=None):
        return self.instance_binding.release(instance_uuid, host, wait=wait,
                                             leases=leases, fault=fault)
