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

"""/v1/hosts: compute nodes on a fabric (admin; services may read)."""

from composable.api.schemas import host as schema
from composable.api import utils
from composable.db import api as db_api
from composable import policies

SORT_KEYS = utils.COMMON_SORT_KEYS


def render(request, host):
    return {
        'uuid': host.uuid,
        'name': host.name,
        'fabric_uuid': host.fabric.uuid,
        'initiator_iqn': host.initiator_iqn,
        'partition_id': host.partition_id,
        'properties': host.properties or {},
        'created_at': utils.isotime(host.created_at),
        'updated_at': utils.isotime(host.updated_at),
        'links': utils.self_link(request, 'hosts', host.uuid),
    }


def list_hosts(request):
    ctx = utils.context(request)
    policies.authorize('composable:host:list', ctx)
    query = utils.parse_query(request, ('fabric',))
    page = utils.pagination(query, SORT_KEYS)
    filters = {}
    if 'fabric' in query:
        filters['fabric_id'] = utils.referenced(
            db_api.fabric_get, ctx, query['fabric'], 'fabric', 'Fabric').id
    hosts = db_api.host_list(ctx, filters=filters, **page)
    items = [render(request, h) for h in hosts]
    return utils.json_response(
        utils.collection(request, 'hosts', items, page, query))


def show_host(request, ident):
    ctx = utils.context(request)
    policies.authorize('composable:host:get', ctx)
    utils.parse_query(request, paginate=False)
    return utils.json_response(render(request, db_api.host_get(ctx, ident)))


def create_host(request):
    ctx = utils.context(request)
    policies.authorize('composable:host:create', ctx)
    body = utils.read_body(request, schema.CREATE)
    utils.check_name('host', body['name'])
    fabric = utils.referenced(db_api.fabric_get, ctx, body.pop('fabric'),
                              'fabric', 'Fabric')
    body['fabric_id'] = fabric.id
    host = db_api.host_create(ctx, body)
    host = db_api.host_get(ctx, host.uuid)
    return utils.json_response(
        render(request, host), status=201,
        headers={'Location': utils.self_link(
            request, 'hosts', host.uuid)[0]['href']})


def update_host(request, ident):
    ctx = utils.context(request)
    policies.authorize('composable:host:update', ctx)
    body = utils.read_body(request, schema.UPDATE)
    host = db_api.host_get(ctx, ident)
    db_api.host_update(ctx, host.uuid, body)
    return utils.json_response(render(request,
                                      db_api.host_get(ctx, host.uuid)))


def delete_host(request, ident):
    ctx = utils.context(request)
    policies.authorize('composable:host:delete', ctx)
    utils.reject_empty_body(request)
    db_api.host_delete(ctx, ident)
    return utils.no_content()
