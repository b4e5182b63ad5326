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

"""ComposableFilter: boot next to a composable lease.

A user who reserved pooled memory or devices as a lease boots with
``--hint composable_lease=<lease uuid>``; this filter keeps only the
compute hosts that reach the lease's fabric, i.e. the hosts in the Nova
host aggregate whose UUID the fabric records (``aggregate_uuid``; Nova
mirrors host aggregates into Placement, where the pool's sharing provider
is a member of the same aggregate).

It loads into nova-scheduler by class path and runs in Nova's own
process, so it imports nothing of composable's service code and keeps its
options in a ``[composable]`` group of nova.conf.

Behaviour
---------
* No ``composable_lease`` hint: every host passes, without any work.
* With the hint, the lease is read **once per scheduling request** from
  the composable API (``GET /v1/leases/<uuid>``), never per host; hosts
  are then matched against ``HostState.aggregates`` in memory. The facts
  are cached per request (keyed by the request id, or by the RequestSpec
  object when there is none) for ``lease_cache_ttl`` seconds, so a
  multi-instance request or a scheduling retry does not read the lease
  again. A pool's aggregate (pool -> fabric -> aggregate) changes rarely
  and is cached for ``pool_cache_ttl`` seconds across requests.
* No host passes when the lease is unknown, belongs to another project
  than the request, is not ``reserved`` (or, for a move of the instance
  already bound to it: ``binding``/``bound``), has no pool with an
  aggregate, or the composable API cannot be reached (the user asked for
  the lease; booting without it would be wrong). The reason is logged.
* A lease holding an SR-IOV virtual function (its device pool is made of
  the VFs of one host's physical function, microversion 1.3) keeps only
  that host: the VF exists nowhere else.
* A flavor that asks for composable devices
  (``resources:CUSTOM_COMPOSABLE_GPU=2``, ``..._PCI_<CLASS>``) keeps only
  the hosts that can reach at least as many free devices of each class
  as it asks for: the devices of the pools whose fabric's aggregate the
  host is in, that the fabric can connect to it (a device's
  ``reachable_hosts``, composable API 1.4; null: every host). Placement
  counts the pools' capacity but knows nothing of a fabric's zones; a
  host that reaches too few would get a lease it cannot bind. The free
  devices are read once per request (``GET /v1/devices?state=available``,
  every page); a composable API older than 1.4 tells nothing of
  reachability, and then this check passes every host.
* A lease named by the hint that holds devices keeps only the hosts that
  can reach them, or, for those they cannot, as many free devices of the
  lease's pool (its bind trades them, see the allocator).
* Rebuilds are not filtered (the host does not change).
* The filter is thread-safe: nova-scheduler runs requests on native
  threads; concurrent requests for the same key wait for one API call.

nova.conf
---------
::

    [filter_scheduler]
    available_filters = nova.scheduler.filters.all_filters
    available_filters = composable.nova.scheduler.ComposableFilter
    enabled_filters = ComputeFilter,...,ComposableFilter

    [composable]
    # keystoneauth: credentials of the Nova service user; they need the
    # "service" role (reads any project's lease, pools and fabrics).
    auth_type = password
    auth_url = http://controller/identity
    username = nova
    password = secret
    user_domain_name = Default
    project_name = service
    project_domain_name = Default
    # or: auth_section = keystone_authtoken
    # Where the composable API is (else found in the catalog by
    # service_type = composable, valid_interfaces = internal,public):
    endpoint_override = http://controller:6590
    # Seconds one HTTP call to the composable API may take:
    timeout = 5
    lease_cache_ttl = 60
    pool_cache_ttl = 300
"""

import collections
import threading
import time
from urllib import parse

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
import nova.conf
from nova.scheduler import filters
from oslo_config import cfg
from oslo_log import log as logging

LOG = logging.getLogger(__name__)
CONF = nova.conf.CONF

GROUP = 'composable'
HINT = 'composable_lease'
SERVICE_TYPE = 'composable'
API_VERSION = '1.0'
# Pools show the host of their SR-IOV virtual functions from 1.3 on; an
# older composable API is read at API_VERSION (it has no such pools).
POOL_API_VERSION = '1.3'
# Devices show the hosts that can reach them from 1.4 on.
DEVICE_API_VERSION = '1.4'

# Resource classes of composable's device pools, copies of
# composable.common.resource_classes.
GPU_CLASS = 'CUSTOM_COMPOSABLE_GPU'
PCI_CLASS_PREFIX = 'CUSTOM_COMPOSABLE_PCI_'
# A free device (composable.common.states.DEVICE_AVAILABLE).
DEVICE_AVAILABLE = 'available'

# Lease states, copies of composable.common.states (this module runs in
# Nova's processes and imports nothing of the service).
RESERVED = 'reserved'
# States in which the lease is already bound to the instance being moved
# (cold/live migration, resize, evacuate, unshelve reuse the hint).
BOUND_STATES = frozenset(['binding', 'bound'])

opts = [
    cfg.IntOpt('lease_cache_ttl',
               default=60,
               min=0,
               help='Seconds the facts of a lease read for one scheduling '
                    'request are reused by the same request.'),
    cfg.IntOpt('lease_cache_size',
               default=512,
               min=1,
               help='Requests whose lease facts are kept at most.'),
    cfg.IntOpt('pool_cache_ttl',
               default=300,
               min=0,
               help='Seconds the aggregate of a composable pool (through '
                    'its fabric) is reused across requests.'),
]

_ADAPTER_VERSION_OPTS = ('version', 'min_version', 'max_version')


def _adapter_opts():
    adapter = [opt for opt in ks_loading.get_adapter_conf_options(
        include_deprecated=False) if opt.dest not in _ADAPTER_VERSION_OPTS]
    cfg.set_defaults(adapter, valid_interfaces=['internal', 'public'],
                     service_type=SERVICE_TYPE)
    return adapter


def register_opts(conf):
    conf.register_group(cfg.OptGroup(
        GROUP, title='composable',
        help='How Nova reaches the composable API (scheduler filter).'))
    conf.register_opts(opts, group=GROUP)
    ks_loading.register_session_conf_options(conf, GROUP)
    ks_loading.register_auth_conf_options(conf, GROUP)
    conf.register_opts(_adapter_opts(), group=GROUP)


def list_opts():
    return {GROUP: (opts + ks_loading.get_session_conf_options() +
                    ks_loading.get_auth_common_conf_options() +
                    ks_loading.get_auth_plugin_conf_options('password') +
                    _adapter_opts())}


register_opts(CONF)


# hosts: the only hosts the lease can be bound to (empty: any host of its
# aggregates). held, free: the reachable hosts (a frozenset, or None for
# every host) of each device the lease holds, and of each free device of
# its device pool; held None: not known (a composable API older than
# 1.4, or no devices).
LeaseFacts = collections.namedtuple(
    'LeaseFacts', ['uuid', 'found', 'project_id', 'status', 'instance_uuid',
                   'aggregates', 'error', 'hosts', 'held', 'free'],
    defaults=(frozenset(), None, ()))

# The free devices of a request: {resource class: {(aggregate uuid, host
# of the pool's SR-IOV functions or None, reachable hosts frozenset or
# None): count}}; None when the composable API is older than 1.4 (it
# tells nothing of reachability). error: why they could not be read.
ReachFacts = collections.namedtuple('ReachFacts', ['free', 'error'])


def _unreadable(uuid, error):
    return LeaseFacts(uuid, False, None, None, None, frozenset(), error)


class TooOld(Exception):
    """The composable API does not serve the microversion asked for."""


def _reaches(hosts, host):
    return hosts is None or host in hosts


def _hosts_of(device):
    hosts = device.get('reachable_hosts')
    return None if hosts is None else frozenset(hosts)


def wanted_devices(spec_obj):
    """{resource class: amount} of composable devices the request's
    flavor asks for (``resources[N]:CUSTOM_COMPOSABLE_GPU`` and
    ``..._PCI_<CLASS>``, every request group summed)."""
    try:
        extra_specs = spec_obj.flavor.extra_specs or {}
    except Exception:
        # A RequestSpec without a flavor (never loaded): nothing asked.
        return {}
    wanted = collections.Counter()
    for key, value in extra_specs.items():
        group, _, resource_class = key.partition(':')
        if not group.startswith('resources') or not (
                resource_class == GPU_CLASS or
                resource_class.startswith(PCI_CLASS_PREFIX)):
            continue
        try:
            amount = int(value)
        except (TypeError, ValueError):
            continue
        if amount > 0:
            wanted[resource_class] += amount
    return dict(wanted)


class _Cache(object):
    """A small thread-safe LRU with expiry; one loader runs per key at a
    time, others asking for the key meanwhile wait for its result."""

    def __init__(self, size, ttl):
        self.size = size
        self.ttl = ttl
        self._lock = threading.Lock()
        self._entries = collections.OrderedDict()
        self._loading = {}

    def get(self, key, loader, valid=None):
        while True:
            with self._lock:
                entry = self._entries.get(key)
                if (entry is not None and entry[0] > time.monotonic() and
                        (valid is None or valid(entry[2]))):
                    self._entries.move_to_end(key)
                    return entry[1]
                waiter = self._loading.get(key)
                if waiter is None:
                    waiter = self._loading[key] = threading.Event()
                    break
            waiter.wait(30)
        try:
            value, tag = loader()
            with self._lock:
                self._entries[key] = (time.monotonic() + self.ttl, value,
                                      tag)
                self._entries.move_to_end(key)
                while len(self._entries) > self.size:
                    self._entries.popitem(last=False)
            return value
        finally:
            with self._lock:
                self._loading.pop(key, None)
            waiter.set()

    def clear(self):
        with self._lock:
            self._entries.clear()


class ComposableAPI(object):
    """Reads leases and pools from the composable API."""

    def __init__(self, adapter=None, conf=None):
        self._conf = conf or CONF
        self._adapter = adapter
        self._lock = threading.Lock()

    @property
    def adapter(self):
        if self._adapter is None:
            with self._lock:
                if self._adapter is None:
                    self._adapter = self._load_adapter()
        return self._adapter

    def _load_adapter(self):
        group = getattr(self._conf, GROUP)
        auth = ks_loading.load_auth_from_conf_options(self._conf, GROUP)
        session = ks_loading.load_session_from_conf_options(
            self._conf, GROUP, auth=auth)
        return ks_adapter.Adapter(
            session, auth=auth, service_type=group.service_type,
            service_name=group.service_name,
            interface=group.valid_interfaces,
            region_name=group.region_name,
            endpoint_override=group.endpoint_override,
            connect_retries=group.connect_retries,
            connect_retry_delay=group.connect_retry_delay,
            status_code_retries=group.status_code_retries,
            status_code_retry_delay=group.status_code_retry_delay)

    def get(self, path, global_request_id=None, microversion=API_VERSION,
            params=None, fallback=True):
        """The decoded body, or None on 404. A composable API older than
        ``microversion`` (406) is asked again at API_VERSION, or, without
        ``fallback``, raises TooOld."""
        kwargs = {'raise_exc': False, 'microversion': microversion,
                  'headers': {'Accept': 'application/json'}}
        if params:
            kwargs['params'] = params
        if global_request_id:
            kwargs['global_request_id'] = global_request_id
        resp = self.adapter.get(path, **kwargs)
        if resp.status_code == 406 and microversion != API_VERSION:
            if not fallback:
                raise TooOld(microversion)
            kwargs['microversion'] = API_VERSION
            resp = self.adapter.get(path, **kwargs)
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise ks_exc.from_response(resp, 'GET', path)
        return resp.json()

    def list(self, path, key, global_request_id=None,
             microversion=API_VERSION, params=None, fallback=True):
        """Every item of a collection, following its ``next`` links."""
        params = dict(params or {})
        items = []
        seen = set()
        while True:
            body = self.get(path, global_request_id, microversion,
                            params=params, fallback=fallback) or {}
            page = body.get(key) or []
            items.extend(page)
            following = [link.get('href') for link in body.get('links') or []
                         if link.get('rel') == 'next']
            if not following or not page:
                return items
            query = dict(parse.parse_qsl(parse.urlsplit(
                following[0]).query))
            marker = query.get('marker')
            if not marker or marker in seen:
                return items
            seen.add(marker)
            params.update(query)


class ComposableFilter(filters.BaseHostFilter):
    """Only hosts on the fabric of the lease named by the
    ``composable_lease`` scheduler hint."""

    RUN_ON_REBUILD = False
    # The lease and the hosts' aggregates do not change between the
    # instances of one request.
    run_filter_once_per_request = True

    def __init__(self, api=None):
        super().__init__()
        self.api = api or ComposableAPI()
        group = getattr(CONF, GROUP)
        self._requests = _Cache(group.lease_cache_size,
                                group.lease_cache_ttl)
        self._pools = _Cache(1024, group.pool_cache_ttl)

    # -------------------------------------------------------------- facts

    def _pool_facts(self, pool_uuid, request_id):
        """(aggregate uuid, host of its SR-IOV virtual functions) of a
        pool; either may be None."""
        def load():
            pool = self.api.get('/v1/pools/%s' % pool_uuid, request_id,
                                microversion=POOL_API_VERSION)
            if pool is None:
                return (None, None), None
            fabric = self.api.get('/v1/fabrics/%s' % pool['fabric_uuid'],
                                  request_id)
            return ((fabric or {}).get('aggregate_uuid'),
                    (pool.get('sriov') or {}).get('host')), None
        return self._pools.get(pool_uuid, load)

    def _pool_aggregate(self, pool_uuid, request_id):
        return self._pool_facts(pool_uuid, request_id)[0]

    def _fabric_aggregate(self, fabric_uuid, request_id):
        def load():
            fabric = self.api.get('/v1/fabrics/%s' % fabric_uuid,
                                  request_id)
            return (fabric or {}).get('aggregate_uuid'), None
        return self._pools.get(('fabric', fabric_uuid), load)

    def _lease_devices(self, lease, request_id):
        """(held, free) of LeaseFacts for a lease holding devices."""
        held = {d.get('uuid') for d in lease.get('devices') or []}
        if not held or not lease.get('device_pool_uuid'):
            return None, ()
        try:
            devices = self.api.list(
                '/v1/devices', 'devices', request_id,
                microversion=DEVICE_API_VERSION,
                params={'pool': lease['device_pool_uuid']}, fallback=False)
        except TooOld:
            return None, ()
        mine = tuple(_hosts_of(d) for d in devices if d.get('uuid') in held)
        free = tuple(_hosts_of(d) for d in devices
                     if d.get('state') == DEVICE_AVAILABLE and
                     not d.get('lease_uuid'))
        return mine, free

    def _load_reach(self, request_id):
        try:
            try:
                devices = self.api.list(
                    '/v1/devices', 'devices', request_id,
                    microversion=DEVICE_API_VERSION,
                    params={'state': DEVICE_AVAILABLE}, fallback=False)
            except TooOld:
                return ReachFacts(None, None)
            pools = {}
            for pool in self.api.list('/v1/pools', 'pools', request_id,
                                      microversion=POOL_API_VERSION):
                pools[pool.get('uuid')] = pool
            free = {}
            for device in devices:
                if device.get('lease_uuid'):
                    continue
                pool = pools.get(device.get('pool_uuid'))
                if pool is None:
                    continue
                aggregate = self._fabric_aggregate(pool.get('fabric_uuid'),
                                                   request_id)
                if not aggregate:
                    continue
                key = (aggregate, (pool.get('sriov') or {}).get('host'),
                       _hosts_of(device))
                counts = free.setdefault(pool.get('resource_class'),
                                         collections.Counter())
                counts[key] += 1
            return ReachFacts(free, None)
        except Exception as err:
            LOG.warning('ComposableFilter could not read the free devices '
                        'from the composable API: %s', err)
            return ReachFacts(None, str(err) or type(err).__name__)

    def reach_facts(self, spec_obj):
        """The free devices and who reaches them, read once per
        request."""
        context = getattr(spec_obj, '_context', None)
        request_id = getattr(context, 'request_id', None)
        global_id = getattr(context, 'global_id', None)
        if request_id:
            key = ('reach', request_id)
            valid = None
            tag = None
        else:
            key = ('reach-spec', id(spec_obj))
            tag = spec_obj

            def valid(held):
                return held is spec_obj
        return self._requests.get(
            key, lambda: (self._load_reach(global_id), tag), valid)

    def _load_facts(self, lease_uuid, request_id):
        try:
            lease = self.api.get('/v1/leases/%s' % lease_uuid, request_id)
            if lease is None:
                return LeaseFacts(lease_uuid, False, None, None, None,
                                  frozenset(), None)
            aggregates = set()
            if lease.get('aggregate_uuid'):
                aggregates.add(lease['aggregate_uuid'])
            else:
                for key in ('memory_pool_uuid', 'device_pool_uuid'):
                    if lease.get(key):
                        aggregate = self._pool_aggregate(lease[key],
                                                         request_id)
                        if aggregate:
                            aggregates.add(aggregate)
            hosts = set()
            if lease.get('device_pool_uuid'):
                sriov_host = self._pool_facts(lease['device_pool_uuid'],
                                              request_id)[1]
                if sriov_host:
                    hosts.add(sriov_host)
            held, free = self._lease_devices(lease, request_id)
            return LeaseFacts(lease_uuid, True, lease.get('project_id'),
                              lease.get('status'),
                              lease.get('instance_uuid'),
                              frozenset(aggregates), None, frozenset(hosts),
                              held, free)
        except Exception as err:
            LOG.warning('ComposableFilter could not read lease %s from the '
                        'composable API: %s', lease_uuid, err)
            return _unreadable(lease_uuid, str(err) or type(err).__name__)

    def lease_facts(self, spec_obj, lease_uuid):
        """The lease's facts, read once per request."""
        context = getattr(spec_obj, '_context', None)
        request_id = getattr(context, 'request_id', None)
        global_id = getattr(context, 'global_id', None)
        if request_id:
            key = (request_id, lease_uuid)
            valid = None
            tag = None
        else:
            # No request id: the RequestSpec object itself is the request.
            key = ('spec', id(spec_obj), lease_uuid)
            tag = spec_obj

            def valid(held):
                return held is spec_obj

        def load():
            return self._load_facts(lease_uuid, global_id), tag
        return self._requests.get(key, load, valid)

    # -------------------------------------------------------------- checks

    @staticmethod
    def _hint(spec_obj):
        try:
            value = spec_obj.get_scheduler_hint(HINT)
        except AttributeError:
            return None
        if isinstance(value, (list, tuple)):
            value = value[0] if value else None
        return value or None

    @staticmethod
    def refusal(facts, spec_obj):
        """Why no host may take this request, or None."""
        if facts.error:
            return ('lease %s could not be read from the composable API: %s'
                    % (facts.uuid, facts.error))
        if not facts.found or facts.project_id != spec_obj.project_id:
            # Another project's lease is reported as unknown.
            return 'lease %s does not exist in project %s' % (
                facts.uuid, spec_obj.project_id)
        moving = (facts.status in BOUND_STATES and facts.instance_uuid and
                  facts.instance_uuid == spec_obj.instance_uuid)
        if facts.status != RESERVED and not moving:
            return ('lease %s is %s; only a reserved lease can be bound to '
                    'a new server' % (facts.uuid, facts.status))
        if not facts.aggregates:
            return ('the fabric of lease %s is in no host aggregate' %
                    facts.uuid)
        return None

    @staticmethod
    def _host_matches(host_state, aggregates, hosts=frozenset()):
        if hosts and host_state.host not in hosts:
            return False
        for aggregate in host_state.aggregates or ():
            if getattr(aggregate, 'uuid', None) in aggregates:
                return True
        return False

    @staticmethod
    def _lease_reachable(host_state, facts):
        """The host reaches the lease's devices, or free devices of its
        pool for those it does not."""
        if facts.held is None:
            return True
        host = host_state.host
        missing = sum(1 for hosts in facts.held if not _reaches(hosts, host))
        if not missing:
            return True
        return sum(1 for hosts in facts.free
                   if _reaches(hosts, host)) >= missing

    @staticmethod
    def _reach_passes(host_state, wanted, reach):
        """The host reaches at least as many free devices of each class
        as the flavor asks for."""
        if reach.free is None:
            return True
        host = host_state.host
        aggregates = {getattr(a, 'uuid', None)
                      for a in host_state.aggregates or ()}
        for resource_class, amount in wanted.items():
            found = 0
            for (aggregate, sriov_host, hosts), count in (
                    reach.free.get(resource_class) or {}).items():
                if (aggregate in aggregates and
                        sriov_host in (None, host) and
                        _reaches(hosts, host)):
                    found += count
            if found < amount:
                return False
        return True

    def _passes(self, host_state, facts, wanted, reach):
        if facts is not None and not (
                self._host_matches(host_state, facts.aggregates,
                                   facts.hosts) and
                self._lease_reachable(host_state, facts)):
            return False
        if wanted and not self._reach_passes(host_state, wanted, reach):
            return False
        return True

    def _request(self, spec_obj):
        """(lease facts or None, wanted devices, reach facts or None),
        or a reason no host may take the request."""
        lease_uuid = self._hint(spec_obj)
        wanted = wanted_devices(spec_obj)
        facts = reach = None
        if lease_uuid is not None:
            facts = self.lease_facts(spec_obj, lease_uuid)
            reason = self.refusal(facts, spec_obj)
            if reason:
                return reason
        if wanted:
            reach = self.reach_facts(spec_obj)
            if reach.error:
                return ('the free devices could not be read from the '
                        'composable API: %s' % reach.error)
        return facts, wanted, reach

    def _is_rebuild(self, spec_obj):
        from nova.scheduler import utils
        return utils.request_is_rebuild(spec_obj)

    def _asks_nothing(self, spec_obj):
        return self._hint(spec_obj) is None and not wanted_devices(spec_obj)

    def filter_all(self, filter_obj_list, spec_obj):
        if self._asks_nothing(spec_obj) or self._is_rebuild(spec_obj):
            return filter_obj_list
        request = self._request(spec_obj)
        if isinstance(request, str):
            LOG.info('ComposableFilter: no host for instance %s: %s',
                     spec_obj.instance_uuid, request)
            return []
        facts, wanted, reach = request
        passed = [host for host in filter_obj_list
                  if self._passes(host, facts, wanted, reach)]
        if wanted and not passed:
            LOG.info('ComposableFilter: no host for instance %s reaches '
                     '%s free device(s) of the composable pools',
                     spec_obj.instance_uuid,
                     ', '.join('%d %s' % (n, rc)
                               for rc, n in sorted(wanted.items())))
        return passed

    def host_passes(self, host_state, spec_obj):
        if self._asks_nothing(spec_obj):
            return True
        request = self._request(spec_obj)
        if isinstance(request, str):
            return False
        return self._passes(host_state, *request)
