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

"""/v1/pools: what is leased and reported to Placement.

Every project may read pools (to choose one for a lease); only admins
manage them.
"""

from oslo_log import log as logging

from composable.api.schemas import pool as schema
from composable.api import utils
from composable.common import exception
from composable.common import media
from composable.common import pool_fit
from composable.common import resource_classes
from composable.common import sriov
from composable import conf
from composable.conf import placement as placement_conf
from composable.db import api as db_api
from composable import policies

CONF = conf.CONF
LOG = logging.getLogger(__name__)

SORT_KEYS = utils.COMMON_SORT_KEYS + ('kind', 'total', 'used')

# The kind of the devices of a device pool ("gpu", or the lower-case device
# class of a pci pool); None for a memory pool.
device_kind = pool_fit.device_kind


def free(pool):
    return max(0, pool.total - pool.reserved - pool.used)


def render(request, pool):
    body = {
        'uuid': pool.uuid,
        'name': pool.name,
        'kind': pool.kind,
        'resource_class': pool.resource_class,
        'fabric_uuid': pool.fabric.uuid,
        'traits': pool.traits or [],
        'total': pool.total,
        'reserved': pool.reserved,
        'used': pool.used,
        'free': free(pool),
        'step_size': pool.step_size,
        'provider_uuid': pool.provider_uuid,
        'description': pool.description,
        'created_at': utils.isotime(pool.created_at),
        'updated_at': utils.isotime(pool.updated_at),
        'links': utils.self_link(request, 'pools', pool.uuid),
    }
    if utils.version(request) >= (1, 3):
        body['sriov'] = sriov.view(pool)
    if utils.version(request) >= (1, 5):
        body['medium'] = media.medium(pool)
    return body


def report_to_placement(request, ctx, pool_uuid, provider_uuid=None):
    # A cast to a conductor rather than a Placement call from here: the
    # conductor holds the Placement client and credentials, the API
    # answers without waiting on Placement, and a change the cast misses
    # (no conductor up, Placement down) is repaired by the conductor's
    # periodic Placement pass anyway.
    if not placement_conf.enabled(CONF):
        return
    try:
        utils.conductor(request).sync_pool_placement(
            ctx, pool_uuid, provider_uuid=provider_uuid)
    except Exception as exc:
        LOG.warning('Could not ask a conductor to update Placement for '
                    'pool %(pool)s (%(err)s); its periodic Placement pass '
                    'will.', {'pool': pool_uuid, 'err': exc})


def list_pools(request):
    ctx = utils.context(request)
    policies.authorize('composable:pool:list', ctx)
    query = utils.parse_query(request, ('kind', 'fabric'))
    page = utils.pagination(query, SORT_KEYS)
    filters = {}
    if 'kind' in query:
        if query['kind'] not in schema.KINDS:
            raise exception.Invalid(
                "Invalid input for query parameter 'kind': %s; accepted: %s"
                % (query['kind'], ', '.join(schema.KINDS)))
        filters['kind'] = query['kind']
    if 'fabric' in query:
        filters['fabric_id'] = utils.referenced(
            db_api.fabric_get, ctx, query['fabric'], 'fabric', 'Fabric').id
    pools = db_api.pool_list(ctx, filters=filters, **page)
    items = [render(request, p) for p in pools]
    return utils.json_response(
        utils.collection(request, 'pools', items, page, query))


def show_pool(request, ident):
    ctx = utils.context(request)
    policies.authorize('composable:pool:get', ctx)
    utils.parse_query(request, paginate=False)
    return utils.json_response(render(request, db_api.pool_get(ctx, ident)))


def create_pool(request):
    ctx = utils.context(request)
    policies.authorize('composable:pool:create', ctx)
    try:
        body = utils.read_body(request, schema.CREATE)
    except exception.Invalid as exc:
        if (utils.version(request) < (1, 3) and
                "field 'sriov'" in exc.message):
            raise exception.Invalid(
                '%s. Pools of SR-IOV virtual functions need API version '
                '1.3 or later (header OpenStack-API-Version: composable '
                '1.3)' % exc.message.rstrip('.'))
        if (utils.version(request) < (1, 5) and
                "field 'medium'" in exc.message):
            raise exception.Invalid(
                '%s. Pools of CXL memory need API version 1.5 or later '
                '(header OpenStack-API-Version: composable 1.5)' %
                exc.message.rstrip('.'))
        raise
    utils.check_name('pool', body['name'])
    kind = body['kind']
    device_class = body.pop('device_class', None)
    if kind == 'pci' and not device_class:
        raise exception.Invalid(
            "Invalid input for field 'device_class': a pci pool needs a "
            "device class, e.g. NVME or FPGA")
    if kind != 'pci' and device_class:
        raise exception.Invalid(
            "Invalid input for field 'device_class': only pci pools have "
            "a device class")
    medium = body.pop('medium', None)
    if medium is not None and kind != 'memory':
        raise exception.Invalid(
            "Invalid input for field 'medium': only memory pools have a "
            "medium, not %s pools" % kind)
    if kind == 'memory':
        medium = medium or media.NETWORK
        body['medium'] = medium
        if medium == media.CXL:
            _check_cxl_step(body.setdefault('step_size',
                                            media.CXL_GRANULE_MB))
        body.setdefault('step_size', CONF.allocator.memory_extent_mb)
    elif 'step_size' in body:
        raise exception.Invalid(
            "Invalid input for field 'step_size': only memory pools have a "
            "step size")
    else:
        body['step_size'] = 1
    utils.validate_traits('traits', body.get('traits'))
    fabric = utils.referenced(db_api.fabric_get, ctx, body.pop('fabric'),
                              'fabric', 'Fabric')
    if medium == media.CXL and fabric.driver != media.CXL:
        raise exception.Invalid(
            "Invalid input for field 'fabric': a cxl memory pool is made of "
            "the memory devices of a fabric with driver cxl (its "
            "driver_info says which hosts reach which device); fabric %s "
            "has driver %s" % (fabric.name, fabric.driver))
    body.update(fabric_id=fabric.id,
                resource_class=resource_classes.for_pool(
                    kind, device_class, medium),
                total=0, used=0)
    body.setdefault('reserved', 0)
    body.setdefault('traits', [])
    sriov_body = body.pop('sriov', None)
    if sriov_body is None:
        pool = db_api.pool_create(ctx, body)
    else:
        pool = _create_sriov_pool(ctx, body, sriov_body, fabric,
                                  device_class)
    pool = db_api.pool_get(ctx, pool.uuid)
    report_to_placement(request, ctx, pool.uuid)
    return utils.json_response(
        render(request, pool), status=201,
        headers={'Location': utils.self_link(
            request, 'pools', pool.uuid)[0]['href']})


def _check_cxl_step(step_size):
    # A region is mapped by HDM decoders in whole granules: a chunk that
    # is not a multiple of one could not be given to a host on its own.
    if step_size % media.CXL_GRANULE_MB:
        raise exception.Invalid(
            "Invalid input for field 'step_size': the chunks of a cxl pool "
            "are whole multiples of the %d MiB a CXL decoder maps, not %d "
            "MiB" % (media.CXL_GRANULE_MB, step_size))


def _normalized_pf_address(value):
    # Validated by the schema's pattern; the domain defaults to 0000, as
    # lspci prints it.
    value = value.lower()
    return value if value.count(':') == 2 else '0000:' + value


def _create_sriov_pool(ctx, body, sriov_body, fabric, device_class):
    """A pci pool of the VFs of one PF of one host, with a device per VF
    (composable.common.sriov)."""
    if body['kind'] != 'pci':
        raise exception.Invalid(
            "Invalid input for field 'sriov': only pci pools can be made of "
            "SR-IOV virtual functions, not %s pools" % body['kind'])
    host = utils.referenced(db_api.host_get, ctx, sriov_body['host'],
                            'sriov/host', 'Host')
    if host.fabric_id != fabric.id:
        raise exception.Invalid(
            "Invalid input for field 'sriov/host': host %s is on fabric "
            "%s, not on the pool's fabric %s" % (
                host.name, host.fabric.name, fabric.name))
    pf_address = _normalized_pf_address(sriov_body['pf_address'])
    for other in db_api.pool_list(ctx, filters={'kind': 'pci'}):
        if (other.sriov_host_id == host.id and
                other.sriov_pf_address == pf_address):
            raise exception.Conflict(
                reason='pool %s is already made of the virtual functions '
                       'of %s on host %s; a physical function serves one '
                       'pool' % (other.name, pf_address, host.name))
    body.update(sriov_host_id=host.id, sriov_pf_address=pf_address,
                sriov_vf_count=sriov_body['vf_count'],
                sriov_vf_mode=sriov_body.get('vf_mode', sriov.ON_DEMAND))
    # The VFs' ids, when given, let the agent check that the function it
    # hands out is one.
    ids = {k: sriov_body[k].lower().replace('0x', '')
           for k in ('vendor_id', 'product_id') if sriov_body.get(k)}
    pool = db_api.sriov_pool_create(ctx, body, device_class.lower(),
                                    vf_values=ids)
    LOG.info('Pool %(pool)s: %(n)d virtual functions of %(pf)s on host '
             '%(host)s (%(mode)s)', {'pool': pool.name,
                                     'n': pool.sriov_vf_count,
                                     'pf': pf_address, 'host': host.name,
                                     'mode': pool.sriov_vf_mode})
    return pool


def update_pool(request, ident):
    ctx = utils.context(request)
    policies.authorize('composable:pool:update', ctx)
    body = utils.read_body(request, schema.UPDATE)
    if 'name' in body:
        utils.check_name('pool', body['name'])
    utils.validate_traits('traits', body.get('traits'))
    pool = db_api.pool_update_checked(ctx, ident, body)
    report_to_placement(request, ctx, pool.uuid)
    return utils.json_response(render(request,
                                      db_api.pool_get(ctx, pool.uuid)))


def delete_pool(request, ident):
    ctx = utils.context(request)
    policies.authorize('composable:pool:delete', ctx)
    utils.reject_empty_body(request)
    pool = db_api.pool_get(ctx, ident)
    db_api.pool_delete(ctx, pool.uuid)
    report_to_placement(request, ctx, pool.uuid, pool.provider_uuid)
    return utils.no_content()
