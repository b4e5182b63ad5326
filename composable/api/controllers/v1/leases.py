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

"""/v1/leases: a project's claims on pooled memory and devices.

The API validates, resolves references and checks the state machine so
that most mistakes are refused at once with a clear message; every change
of a lease is then made by the conductor (create, bind, unbind, delete,
and name, description and end_at), under the lease's reservation, where
the rules a change must keep are checked (composable.conductor.rules).

A lease of another project is reported as not found, never as forbidden:
its existence is not the caller's business.
"""

import copy

from oslo_utils import uuidutils

from composable.api.schemas import lease as schema
from composable.api import utils
from composable.api import validation
from composable.common import context as composable_context
from composable.common import exception
from composable.common import media
from composable.common import pool_fit
from composable.common import states
from composable.conductor import rules
from composable.db import api as db_api
from composable.db import views
from composable import policies

SORT_KEYS = utils.COMMON_SORT_KEYS + ('status', 'memory_mb', 'device_count',
                                      'start_at', 'end_at')
LIST_FILTERS = ('project_id', 'all_projects', 'status', 'pool', 'kind',
                'host', 'instance_uuid', 'name')
# Elastic leases (1.2): headroom when the request gives none.
DEFAULT_HEADROOM = 0.2
# The devices a lease asks for when it names neither a kind, nor devices,
# nor device pools.
DEFAULT_DEVICE_KIND = 'gpu'
# Usage samples (1.1).
USAGE_VERSION = (1, 1)
ELASTIC_VERSION = (1, 2)
# Elastic leases of CXL pools, resized through virtio-mem (1.7).
ELASTIC_CXL_VERSION = (1, 7)

# Released leases are history: listed only when asked for by status.
DEFAULT_LIST_STATES = sorted(states.ALL_STATES - {states.RELEASED})


def present(request, document):
    """The lease ``document`` (composable.db.views) as ``request``'s caller
    may see it: admin-only fields removed for others, links added."""
    body = dict(document)
    if tuple(utils.version(request)) < ELASTIC_VERSION:
        body.pop('elastic', None)
    elif not body.get('elastic'):
        body['elastic'] = None
    if not utils.context(request).is_admin:
        body['extents'] = [
            {k: v for k, v in e.items()
             if k not in views.ADMIN_EXTENT_FIELDS}
            for e in document['extents']]
        body['devices'] = [
            {k: v for k, v in d.items()
             if k not in views.ADMIN_DEVICE_FIELDS}
            for d in document['devices']]
    body['links'] = utils.self_link(request, 'leases', document['uuid'])
    return body


def render(request, lease):
    return present(request, views.lease_document(lease))


def _admin_context():
    return composable_context.get_admin_context()


def _lease_for_view(ctx, ident):
    return db_api.lease_get(ctx, ident, for_view=True)


def _get_lease(ctx, ident, rule, lookup=db_api.lease_get):
    """The lease ``ident`` if ``ctx`` may read it, else LeaseNotFound; then
    Forbidden unless ``ctx`` may also do ``rule`` on it. ``lookup`` may be
    db_api.lease_ref where only the lease's identity and state are used.
    """
    if uuidutils.is_uuid_like(ident):
        lease = lookup(_admin_context(), ident)
    else:
        # A name is looked up among the live leases of the caller's own
        # project (every project for admins), where it is unique.
        lease = lookup(ctx, ident)
    target = {'project_id': lease.project_id}
    if not policies.check('composable:lease:get', ctx, target):
        raise exception.LeaseNotFound(lease=ident)
    if rule != 'composable:lease:get':
        policies.authorize(rule, ctx, target)
    return lease


def _rpc_context(ctx, lease):
    """The context to send to the conductor for ``lease``.

    Policy has allowed the caller this operation on this lease; a service
    acting on another project's lease (Nova for an instance) needs the
    conductor to find it outside the caller's own project.
    """
    if ctx.is_admin or lease.project_id == ctx.project_id:
        return ctx
    rpc_ctx = copy.copy(ctx)
    rpc_ctx.is_admin = True
    return rpc_ctx


def _reread(lease):
    return db_api.lease_get(_admin_context(), lease.uuid, for_view=True)


def _check_transition(lease, event, action):
    if not states.check(lease.status, event):
        raise exception.InvalidState(lease=lease.uuid, status=lease.status,
                                     action=action,
                                     hint=states.hint(lease.status, event))


def list_leases(request):
    ctx = utils.context(request)
    policies.authorize('composable:lease:list', ctx)
    query = utils.parse_query(request, LIST_FILTERS)
    page = utils.pagination(query, SORT_KEYS)
    all_projects = utils.bool_param(query, 'all_projects')
    project_id = query.get('project_id')
    db_ctx = ctx
    if all_projects or (project_id and project_id != ctx.project_id):
        policies.authorize('composable:lease:list:all_projects', ctx)
        db_ctx = _admin_context()
    filters = {}
    if project_id or not all_projects:
        filters['project_id'] = project_id or ctx.project_id
    if 'status' in query:
        wanted = [s.strip() for s in query['status'].split(',') if s.strip()]
        unknown = sorted(set(wanted) - states.ALL_STATES)
        if unknown or not wanted:
            raise exception.Invalid(
                "Invalid input for query parameter 'status': %s; accepted: "
                "%s" % (query['status'], ', '.join(sorted(states.ALL_STATES))))
        filters['status'] = wanted
    else:
        filters['status'] = DEFAULT_LIST_STATES
    if 'pool' in query:
        filters['pool_id'] = utils.referenced(
            db_api.pool_get, ctx, query['pool'], 'pool', 'Pool').id
    if 'kind' in query:
        filters['kind'] = query['kind']
    if 'host' in query:
        filters['host_id'] = utils.referenced(
            db_api.host_get, ctx, query['host'], 'host', 'Host').id
    for key in ('instance_uuid', 'name'):
        if key in query:
            filters[key] = query[key]
    leases = db_api.lease_list(db_ctx, filters=filters, for_view=True,
                               **page)
    items = [render(request, lease) for lease in leases]
    return utils.json_response(
        utils.collection(request, 'leases', items, page, query))


def show_lease(request, ident):
    ctx = utils.context(request)
    utils.parse_query(request, paginate=False)
    lease = _get_lease(ctx, ident, 'composable:lease:get',
                       lookup=_lease_for_view)
    return utils.json_response(render(request, lease))


def _check_order(start_at, end_at):
    if start_at is not None and end_at is not None and end_at <= start_at:
        raise exception.Invalid(
            "Invalid input for field 'end_at': it must be after start_at")


def _check_pool_kinds(device_kind, given):
    """The pools a request names must hold what it asks for; whether the
    request fits them is the conductor's to say."""
    if given is None:
        return
    if device_kind is not None:
        candidates = [p for p in given if p.kind != 'memory']
        if not candidates:
            raise exception.Invalid(
                "Invalid input for field 'pools': none of them is a device "
                "pool, and the lease asks for devices")
        for pool in candidates:
            if pool_fit.device_kind(pool) != device_kind:
                raise exception.Invalid(
                    "Invalid input for field 'pools': pool %s holds %s "
                    "devices, not %s" % (pool.name,
                                         pool_fit.device_kind(pool),
                                         device_kind))


def _kind_of_pools(given):
    """The kind of devices the device pools a request names hold (an
    SR-IOV pool of NIC virtual functions: "nic"), for a request that names
    no device_kind; None when it names no device pool. Pools of several
    kinds leave the choice to the user."""
    kinds = sorted({pool_fit.device_kind(p) for p in given or []
                    if p.kind != 'memory'})
    if len(kinds) > 1:
        raise exception.Invalid(
            "Invalid input for field 'device_kind': the pools named hold "
            "devices of several kinds (%s); say which one the lease asks "
            "for" % ', '.join(kinds))
    return kinds[0] if kinds else None


def _check_memory_pools(memory_mb, given):
    if given is not None and memory_mb and not any(
            p.kind == 'memory' for p in given):
        raise exception.Invalid(
            "Invalid input for field 'pools': none of them is a memory "
            "pool, and the lease asks for memory_mb")


def _check_cxl_pools(memory_mb, given, attach_mode, elastic,
                     version=ELASTIC_CXL_VERSION):
    """A lease on a cxl pool holds whole chunks of the device and is
    bound to a host. A size that is not a whole number of chunks is
    refused rather than rounded up: the lease's memory_mb is what
    Placement claims and what the host gets, and an owner who asked for
    1000 MiB must not be charged for 1024 without being told. From 1.7
    such a lease may be elastic when it is attached in virtio-mem mode
    on a fabric that composes nothing (rules.elastic_cxl_refusal)."""
    memory = [p for p in given or [] if p.kind == 'memory']
    cxl = [p for p in memory if media.is_cxl(p)]
    if attach_mode == states.ATTACH_VIRTIO_MEM:
        if not memory_mb:
            raise exception.Invalid(rules.attach_medium_refusal(
                attach_mode, None))
        if not memory:
            raise exception.Invalid(
                "Invalid input for field 'pools': virtio-mem needs host "
                "memory (a CXL pool) to plug into the guest; name the CXL "
                "pool")
        refused = [p for p in memory if p not in cxl]
        if refused:
            raise exception.Invalid(rules.attach_medium_refusal(
                attach_mode, refused[0]))
    if not cxl:
        return
    if len(cxl) != len(memory):
        raise exception.Invalid(
            "Invalid input for field 'pools': %s hold CXL memory and %s "
            "network memory; name memory pools of one medium" % (
                ', '.join(p.name for p in cxl),
                ', '.join(p.name for p in memory if p not in cxl)))
    refusal = rules.attach_medium_refusal(attach_mode, cxl[0])
    if refusal:
        raise exception.Invalid(refusal)
    if elastic and tuple(version) < ELASTIC_CXL_VERSION:
        raise exception.Invalid(
            "Invalid input for field 'elastic': leases of CXL memory (pool "
            "%s) have a fixed size before API version 1.7, which resizes "
            "them through virtio-mem" % cxl[0].name)
    if elastic:
        for pool in cxl:
            refusal = rules.elastic_cxl_refusal(pool, attach_mode, elastic)
            if refusal:
                raise exception.Invalid(refusal)
    for pool in cxl:
        step = pool.step_size or media.CXL_GRANULE_MB
        if memory_mb % step:
            raise exception.Invalid(
                "Invalid input for field 'memory_mb': pool %s gives CXL "
                "memory in whole chunks of %d MiB; ask for a multiple of "
                "%d MiB (%d or %d), not %d" % (
                    pool.name, step, step, memory_mb // step * step or step,
                    (memory_mb // step + 1) * step, memory_mb))


def _requested_devices(ctx, idents, device_kind):
    """The devices ``idents`` name; whether they are still free is the
    conductor's to say, when it claims them."""
    devices = []
    for ident in idents:
        device = utils.referenced(db_api.device_get, ctx, ident,
                                  'device_uuids', 'Device')
        if device_kind is not None and device.kind != device_kind:
            raise exception.Invalid(
                "Invalid input for field 'device_uuids': device %s is a %s, "
                "not a %s" % (device.uuid, device.kind, device_kind))
        devices.append(device)
    return devices


def _elastic_policy(elastic, memory_mb, device_count, given):
    """The elastic policy to store, checked against the lease asked for
    and the pools it names; None for a lease of fixed size. Whether the
    pool the lease gets takes these sizes in whole extents is the
    conductor's to check for a lease that names no pool."""
    if elastic is None:
        return None
    field = "Invalid input for field 'elastic/%s': "
    if not memory_mb:
        raise exception.Invalid(
            "Invalid input for field 'elastic': only a memory lease can be "
            "elastic; give memory_mb")
    if device_count:
        raise exception.Invalid(
            "Invalid input for field 'elastic': an elastic lease holds "
            "memory only; lease the devices separately")
    low, high = elastic['min_mb'], elastic['max_mb']
    if low > high:
        raise exception.Invalid(
            (field % 'min_mb') + '%d is more than max_mb %d' % (low, high))
    if not low <= memory_mb <= high:
        raise exception.Invalid(
            "Invalid input for field 'memory_mb': an elastic lease starts "
            "within [min_mb, max_mb] = [%d, %d], not at %d"
            % (low, high, memory_mb))
    for pool in given or []:
        if pool.kind != 'memory':
            continue
        step = pool.step_size or 1
        for name in ('min_mb', 'max_mb'):
            if elastic[name] % step:
                raise exception.Invalid(
                    (field % name) + '%d is not a whole number of the %d '
                    'MiB extents of pool %s' % (elastic[name], step,
                                                pool.name))
    policy = dict(elastic)
    policy.setdefault('headroom', DEFAULT_HEADROOM)
    return policy


def create_lease(request):
    ctx = utils.context(request)
    policies.authorize('composable:lease:create', ctx)
    body = utils.read_body(request, schema.CREATE)
    if body.get('name') is not None:
        utils.check_name('lease', body['name'])
    memory_mb = body.get('memory_mb') or 0
    device_count = body.get('device_count') or 0
    device_idents = body.get('device_uuids') or []
    if not (memory_mb or device_count or device_idents):
        raise exception.Invalid(
            'A lease needs at least one of memory_mb, device_count or '
            'device_uuids.')
    start_at = utils.parse_time('start_at', body.get('start_at'))
    end_at = utils.parse_time('end_at', body.get('end_at'))
    _check_order(start_at, end_at)
    utils.validate_traits('device_traits', body.get('device_traits'))

    given = None
    if body.get('pools'):
        given = [utils.referenced(db_api.pool_get, ctx, ident, 'pools',
                                  'Pool') for ident in body['pools']]
        for pool in given:
            if pool.kind == 'memory' and not memory_mb:
                raise exception.Invalid(
                    "Invalid input for field 'pools': %s is a memory pool "
                    "and the lease asks for no memory" % pool.name)
            if pool.kind != 'memory' and not (device_count or
                                              device_idents):
                raise exception.Invalid(
                    "Invalid input for field 'pools': %s is a %s pool and "
                    "the lease asks for no devices" % (pool.name, pool.kind))

    device_kind = None
    devices = []
    if device_count or device_idents:
        device_kind = body.get('device_kind')
        if device_idents:
            devices = _requested_devices(ctx, device_idents, device_kind)
            device_kind = device_kind or devices[0].kind
            if device_count and device_count != len(devices):
                raise exception.Invalid(
                    "Invalid input for field 'device_count': %d, but %d "
                    "device_uuids are given" % (device_count, len(devices)))
            device_count = len(devices)
        device_kind = (device_kind or _kind_of_pools(given) or
                       DEFAULT_DEVICE_KIND)
        _check_pool_kinds(device_kind, given)
    elif body.get('device_kind') or body.get('device_model') or \
            body.get('device_traits'):
        raise exception.Invalid(
            "Invalid input for field 'device_count': device filters are "
            "given but no devices are asked for")
    _check_memory_pools(memory_mb, given)
    _check_cxl_pools(memory_mb, given,
                     body.get('attach_mode', states.ATTACH_HOST),
                     body.get('elastic'), version=utils.version(request))
    elastic = _elastic_policy(body.get('elastic'), memory_mb, device_count,
                              given)

    values = {
        'name': body.get('name'),
        'description': body.get('description'),
        'project_id': ctx.project_id,
        'user_id': ctx.user_id,
        'memory_mb': memory_mb,
        'device_count': device_count,
        'device_kind': device_kind,
        'device_model': body.get('device_model'),
        'device_traits': body.get('device_traits') or [],
        'requested_pools': [p.uuid for p in given or []],
        'requested_devices': [d.uuid for d in devices],
        'attach_mode': body.get('attach_mode', states.ATTACH_HOST),
        'start_at': utils.isotime(start_at),
        'end_at': utils.isotime(end_at),
    }
    if elastic:
        values['elastic'] = elastic
    body = present(request, utils.conductor(request).create_lease(ctx,
                                                                  values))
    return utils.json_response(
        body, status=201,
        headers={'Location': body['links'][0]['href']})


def update_lease(request, ident):
    ctx = utils.context(request)
    body = utils.read_body(request, schema.UPDATE)
    lease = _get_lease(ctx, ident, 'composable:lease:update',
                       lookup=db_api.lease_ref)
    if body.get('name') is not None:
        utils.check_name('lease', body['name'])
    if 'end_at' in body:
        body['end_at'] = utils.isotime(utils.parse_time('end_at',
                                                        body['end_at']))
    if body:
        # Every change in one call: the conductor checks each field by
        # its rule under the lease's reservation (whether the end is
        # still ahead must not race the lease's expiry) and writes them
        # all at once, or none.
        utils.conductor(request).update_lease(_rpc_context(ctx, lease),
                                              lease.uuid, body)
    return utils.json_response(render(request, _reread(lease)))


def _own_project_may(ctx, *rules):
    """True when policy lets ``ctx`` do every one of ``rules`` on a lease of
    its own project."""
    target = {'project_id': ctx.project_id}
    return all(policies.check(rule, ctx, target) for rule in rules)


def delete_lease(request, ident):
    ctx = utils.context(request)
    utils.reject_empty_body(request)
    conductor = utils.conductor(request)
    if not ctx.is_admin and _own_project_may(ctx, 'composable:lease:get',
                                             'composable:lease:delete'):
        # The usual case, a project deleting one of its own leases: the
        # conductor looks the lease up in the caller's project (a lease of
        # another project is not found there) in the same transaction that
        # releases it, and refuses a lease that cannot be deleted now as
        # below (InvalidState). Policy was checked against that project:
        # the same answer as checking it against the lease found.
        try:
            conductor.delete_lease(ctx, ident)
            return utils.no_content()
        except exception.LeaseNotFound:
            # Not in the caller's project: the general way decides
            # between 404 and a service acting on another project.
            pass
    lease = _get_lease(ctx, ident, 'composable:lease:delete',
                       lookup=db_api.lease_ref)
    _check_transition(lease, states.DELETE, 'delete')
    conductor.delete_lease(_rpc_context(ctx, lease), lease.uuid)
    return utils.no_content()


def bind_lease(request, ident):
    ctx = utils.context(request)
    body = utils.read_body(request, schema.BIND)
    lease = _get_lease(ctx, ident, 'composable:lease:bind',
                       lookup=db_api.lease_ref)
    server = body.get('server')
    if not body.get('host') and not server:
        raise exception.Invalid(
            "Invalid input for field 'host': give the host (name or UUID) "
            "to bind to, or the server to bind where it runs")
    host = None
    if body.get('host'):
        host = utils.referenced(db_api.host_get, ctx, body['host'], 'host',
                                'Host')
    # Whether the lease may be bound so (its state, the host's fabric, a
    # guest-mode lease's server, an SR-IOV lease's host) is the
    # conductor's to say, under the lease's reservation
    # (composable.conductor.rules); its refusal is the answer. With a
    # server and no host, the conductor asks Nova where the server runs
    # (and refuses when it cannot: no [nova] configured).
    utils.conductor(request).bind_lease(_rpc_context(ctx, lease),
                                        lease.uuid,
                                        host.uuid if host else None,
                                        instance_uuid=server,
                                        attach_mode=body.get('attach_mode'))
    return utils.json_response(render(request, _reread(lease)), status=202)


def unbind_lease(request, ident):
    ctx = utils.context(request)
    body = utils.read_body(request, schema.UNBIND, allow_empty=True)
    del body
    lease = _get_lease(ctx, ident, 'composable:lease:unbind')
    _check_transition(lease, states.UNBIND, 'unbind')
    utils.conductor(request).unbind_lease(_rpc_context(ctx, lease),
                                          lease.uuid)
    return utils.json_response(render(request, _reread(lease)), status=202)


def _render_action(action):
    return {
        'action': action.action,
        'request_id': action.request_id,
        'user_id': action.user_id,
        'project_id': action.project_id,
        'start_time': utils.isotime(action.start_time),
        'finish_time': utils.isotime(action.finish_time),
        'result': action.result,
        'message': action.message,
    }


def list_actions(request, ident):
    ctx = utils.context(request)
    utils.parse_query(request, paginate=False)
    lease = _get_lease(ctx, ident, 'composable:lease:action:list')
    actions = db_api.action_list(_admin_context(), lease.id)
    return utils.json_response(
        {'actions': [_render_action(a) for a in actions]})


def _parse_usage_query(request):
    query = utils.parse_query(request, ('since', 'limit', 'marker'),
                              paginate=False)
    validation.validate(schema.USAGE_QUERY, query)
    since = utils.parse_time('since', query.get('since'))
    limit = int(query['limit']) if 'limit' in query else \
        utils.CONF.api.default_limit
    if limit < 1:
        raise exception.Invalid(
            "Invalid input for query parameter 'limit': %s is not a "
            "positive integer" % query['limit'])
    return query, since, min(limit, utils.CONF.api.max_limit), \
        query.get('marker')


def show_usage(request, ident):
    """GET /v1/leases/{lease}/usage (1.1): the lease's usage samples,
    oldest first, paginated by sample id."""
    if tuple(utils.version(request)) < USAGE_VERSION:
        raise exception.NotInVersion(
            what='The usage of leases',
            version='.'.join(map(str, USAGE_VERSION)))
    ctx = utils.context(request)
    query, since, limit, marker = _parse_usage_query(request)
    lease = _get_lease(ctx, ident, 'composable:lease:get')
    rows = db_api.usage_list(_admin_context(), lease.id,
                             since=since, limit=limit,
                             marker=marker)
    samples = [{'id': row.id, 'taken_at': utils.isotime(row.taken_at),
                'used_mb': row.used_mb, 'size_mb': row.size_mb}
               for row in rows]
    body = {'lease_uuid': lease.uuid, 'usage': samples}
    if samples and len(samples) >= limit:
        params = {k: v for k, v in query.items() if k != 'marker'}
        params['limit'] = str(limit)
        params['marker'] = str(samples[-1]['id'])
        body['links'] = [{
            'rel': 'next',
            'href': '%s/v1/leases/%s/usage?%s' % (
                utils.base_url(request), lease.uuid,
                utils.parse.urlencode(sorted(params.items())))}]
    return utils.json_response(body)
