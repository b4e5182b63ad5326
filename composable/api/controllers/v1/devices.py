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

"""/v1/devices: pooled PCIe devices (admin only)."""

from composable.api.controllers.v1 import pools
from composable.api.schemas import device as schema
from composable.api import utils
from composable.common import context as composable_context
from composable.common import exception
from composable.common import sriov
from composable.common import states
from composable.db import api as db_api
from composable import policies

SORT_KEYS = utils.COMMON_SORT_KEYS + ('address', 'kind', 'model', 'state')


def _lease_uuid(lease_id, cache):
    if lease_id is None:
        return None
    if lease_id not in cache:
        try:
            cache[lease_id] = db_api.lease_get_by_id(
                composable_context.get_admin_context(), lease_id).uuid
        except exception.LeaseNotFound:
            cache[lease_id] = None
    return cache[lease_id]


def render(request, device, lease_cache=None):
    lease_cache = {} if lease_cache is None else lease_cache
    body = {
        'uuid': device.uuid,
        'name': device.name,
        'pool_uuid': device.pool.uuid,
        'fabric_uuid': device.pool.fabric.uuid,
        'address': device.address,
        'kind': device.kind,
        'vendor_id': device.vendor_id,
        'product_id': device.product_id,
        'model': device.model,
        'traits': device.traits or [],
        'state': device.state,
        'lease_uuid': _lease_uuid(device.lease_id, lease_cache),
        'pci_address': device.pci_address,
        'created_at': utils.isotime(device.created_at),
        'updated_at': utils.isotime(device.updated_at),
        'links': utils.self_link(request, 'devices', device.uuid),
    }
    if utils.version(request) >= (1, 4):
        body.update(serial=device.serial, health=device.health,
                    health_reason=device.health_reason,
                    reachable_hosts=device.reachable_hosts)
    return body


def list_devices(request):
    ctx = utils.context(request)
    policies.authorize('composable:device:list', ctx)
    query = utils.parse_query(request, ('pool', 'state', 'kind', 'model'))
    page = utils.pagination(query, SORT_KEYS)
    filters = {'state': query.get('state'), 'kind': query.get('kind'),
               'model': query.get('model')}
    if filters['state'] is not None and filters['state'] not in \
            schema.STATES:
        raise exception.Invalid(
            "Invalid input for query parameter 'state': %s; accepted: %s"
            % (filters['state'], ', '.join(schema.STATES)))
    if 'pool' in query:
        filters['pool_id'] = utils.referenced(
            db_api.pool_get, ctx, query['pool'], 'pool', 'Pool').id
    devices = db_api.device_list(ctx, filters=filters, **page)
    cache = {}
    items = [render(request, d, cache) for d in devices]
    return utils.json_response(
        utils.collection(request, 'devices', items, page, query))


def show_device(request, ident):
    ctx = utils.context(request)
    policies.authorize('composable:device:get', ctx)
    utils.parse_query(request, paginate=False)
    return utils.json_response(
        render(request, db_api.device_get(ctx, ident)))


def create_device(request):
    ctx = utils.context(request)
    policies.authorize('composable:device:create', ctx)
    body = utils.read_body(request, schema.CREATE)
    if body.get('name') is not None:
        utils.check_name('device', body['name'])
    pool = utils.referenced(db_api.pool_get, ctx, body.pop('pool'), 'pool',
                            'Pool')
    if pool.kind not in ('gpu', 'pci'):
        raise exception.Invalid(
            "Invalid input for field 'pool': pool %s is a %s pool; devices "
            "belong to gpu or pci pools" % (pool.name, pool.kind))
    if sriov.is_sriov_pool(pool):
        raise exception.Invalid(
            "Invalid input for field 'pool': the devices of pool %s are the "
            "virtual functions of %s on host %s, made with the pool; "
            "create another pool for other devices" % (
                pool.name, pool.sriov_pf_address, pool.sriov_host.name))
    expected_kind = pools.device_kind(pool)
    kind = body.setdefault('kind', expected_kind)
    if kind != expected_kind:
        raise exception.Invalid(
            "Invalid input for field 'kind': devices of pool %s are of "
            "kind %s, not %s" % (pool.name, expected_kind, kind))
    utils.validate_traits('traits', body.get('traits'))
    for field in ('vendor_id', 'product_id'):
        if body.get(field):
            body[field] = body[field].lower()
    body.setdefault('traits', [])
    body.update(pool_id=pool.id, state=states.DEVICE_AVAILABLE)
    device = db_api.device_create(ctx, body)
    device = db_api.device_get(ctx, device.uuid)
    # The pool's total follows its devices: so does its Placement
    # inventory.
    pools.report_to_placement(request, ctx, pool.uuid)
    return utils.json_response(
        render(request, device), status=201,
        headers={'Location': utils.self_link(
            request, 'devices', device.uuid)[0]['href']})


def update_device(request, ident):
    ctx = utils.context(request)
    policies.authorize('composable:device:update', ctx)
    body = utils.read_body(request, schema.UPDATE)
    if body.get('name') is not None:
        utils.check_name('device', body['name'])
    utils.validate_traits('traits', body.get('traits'))
    device = db_api.device_get(ctx, ident)
    db_api.device_update(ctx, device.uuid, body)
    pools.report_to_placement(request, ctx, device.pool.uuid)
    return utils.json_response(
        render(request, db_api.device_get(ctx, device.uuid)))


def delete_device(request, ident):
    ctx = utils.context(request)
    policies.authorize('composable:device:delete', ctx)
    utils.reject_empty_body(request)
    device = db_api.device_get(ctx, ident)
    if sriov.is_sriov_pool(device.pool):
        raise exception.Conflict(
            reason='device %s is a virtual function of pool %s and goes '
                   'with the pool; take it out of service with state '
                   'maintenance instead' % (device.uuid, device.pool.name))
    db_api.device_delete(ctx, device.uuid)
    pools.report_to_placement(request, ctx, device.pool.uuid)
    return utils.no_content()
