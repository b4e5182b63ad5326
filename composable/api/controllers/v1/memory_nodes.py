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

"""/v1/memory_nodes: nodes that export RAM to a memory pool (admin only)."""

from importlib import metadata

from composable.api.controllers.v1 import pools as pools_controller
from composable.api.schemas import memory_node as schema
from composable.api import utils
from composable.common import exception
from composable.common import media
from composable.db import api as db_api
from composable import policies

SORT_KEYS = utils.COMMON_SORT_KEYS + ('capacity_mb', 'allocated_mb')
EXPORTER_NAMESPACE = 'composable.memory.exporters'


def render(request, node):
    return {
        'uuid': node.uuid,
        'name': node.name,
        'pool_uuid': node.pool.uuid,
        'fabric_uuid': node.pool.fabric.uuid,
        'capacity_mb': node.capacity_mb,
        'reserved_mb': node.reserved_mb,
        'allocated_mb': node.allocated_mb,
        'exporter': node.exporter,
        'portal': node.portal,
        'transport': node.transport,
        'enabled': node.enabled,
        'created_at': utils.isotime(node.created_at),
        'updated_at': utils.isotime(node.updated_at),
        'links': utils.self_link(request, 'memory_nodes', node.uuid),
    }


def _exporters():
    return sorted(ep.name for ep in
                  metadata.entry_points(group=EXPORTER_NAMESPACE))


def _check_reserved(capacity_mb, reserved_mb):
    if reserved_mb > capacity_mb:
        raise exception.Invalid(
            "Invalid input for field 'reserved_mb': %d is more than "
            "capacity_mb (%d)" % (reserved_mb, capacity_mb))


def _check_cxl_device(pool, body):
    """A memory node of a cxl pool is one CXL memory device: its name is
    the device's in the fabric's driver_info, it serves no exports, and
    its capacity is given out in whole chunks of the pool."""
    exporter = body.setdefault('exporter', media.CXL_EXPORTER)
    if exporter != media.CXL_EXPORTER:
        raise exception.Invalid(
            "Invalid input for field 'exporter': the memory nodes of cxl "
            "pool %s are CXL memory devices, with exporter cxl, not %s" %
            (pool.name, exporter))
    step = pool.step_size or media.CXL_GRANULE_MB
    for field in ('capacity_mb', 'reserved_mb'):
        if body.get(field, 0) % step:
            raise exception.Invalid(
                "Invalid input for field '%s': pool %s gives CXL memory in "
                "whole chunks of %d MiB; %d MiB is not a whole number of "
                "them" % (field, pool.name, step, body[field]))


def list_memory_nodes(request):
    ctx = utils.context(request)
    policies.authorize('composable:memory_node:list', ctx)
    query = utils.parse_query(request, ('pool',))
    page = utils.pagination(query, SORT_KEYS)
    filters = {}
    if 'pool' in query:
        filters['pool_id'] = utils.referenced(
            db_api.pool_get, ctx, query['pool'], 'pool', 'Pool').id
    nodes = db_api.memory_node_list(ctx, filters=filters, **page)
    items = [render(request, n) for n in nodes]
    return utils.json_response(
        utils.collection(request, 'memory_nodes', items, page, query))


def show_memory_node(request, ident):
    ctx = utils.context(request)
    policies.authorize('composable:memory_node:get', ctx)
    utils.parse_query(request, paginate=False)
    return utils.json_response(
        render(request, db_api.memory_node_get(ctx, ident)))


def create_memory_node(request):
    ctx = utils.context(request)
    policies.authorize('composable:memory_node:create', ctx)
    body = utils.read_body(request, schema.CREATE)
    utils.check_name('memory node', body['name'])
    pool = utils.referenced(db_api.pool_get, ctx, body.pop('pool'), 'pool',
                            'Pool')
    if pool.kind != 'memory':
        raise exception.Invalid(
            "Invalid input for field 'pool': pool %s is a %s pool; memory "
            "nodes belong to memory pools" % (pool.name, pool.kind))
    body.setdefault('reserved_mb', 0)
    _check_reserved(body['capacity_mb'], body['reserved_mb'])
    if media.is_cxl(pool):
        _check_cxl_device(pool, body)
    elif body.get('exporter') == media.CXL_EXPORTER:
        raise exception.Invalid(
            "Invalid input for field 'exporter': cxl is the exporter of the "
            "memory devices of a cxl pool; pool %s is a network pool" %
            pool.name)
    body.setdefault('exporter', 'noop')
    exporters = _exporters() + [media.CXL_EXPORTER]
    if body['exporter'] not in exporters:
        raise exception.Invalid(
            "Invalid input for field 'exporter': %s is not installed; "
            "available: %s" % (body['exporter'],
                               ', '.join(exporters) or 'none'))
    body.setdefault('transport', 'tcp')
    body.setdefault('enabled', True)
    body.update(pool_id=pool.id, allocated_mb=0)
    node = db_api.memory_node_create(ctx, body)
    node = db_api.memory_node_get(ctx, node.uuid)
    # The pool's total follows its nodes: so does its Placement inventory.
    pools_controller.report_to_placement(request, ctx, pool.uuid)
    return utils.json_response(
        render(request, node), status=201,
        headers={'Location': utils.self_link(
            request, 'memory_nodes', node.uuid)[0]['href']})


def update_memory_node(request, ident):
    ctx = utils.context(request)
    policies.authorize('composable:memory_node:update', ctx)
    body = utils.read_body(request, schema.UPDATE)
    node = db_api.memory_node_get(ctx, ident)
    _check_reserved(body.get('capacity_mb', node.capacity_mb),
                    body.get('reserved_mb', node.reserved_mb))
    if media.is_cxl(node.pool):
        _check_cxl_device(node.pool, dict(
            {'capacity_mb': node.capacity_mb,
             'reserved_mb': node.reserved_mb}, **body))
    db_api.memory_node_update(ctx, node.uuid, body)
    pools_controller.report_to_placement(request, ctx, node.pool.uuid)
    return utils.json_response(
        render(request, db_api.memory_node_get(ctx, node.uuid)))


def delete_memory_node(request, ident):
    ctx = utils.context(request)
    policies.authorize('composable:memory_node:delete', ctx)
    utils.reject_empty_body(request)
    node = db_api.memory_node_get(ctx, ident)
    db_api.memory_node_delete(ctx, node.uuid)
    pools_controller.report_to_placement(request, ctx, node.pool.uuid)
    return utils.no_content()
