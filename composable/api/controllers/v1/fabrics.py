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

"""/v1/fabrics: interconnect domains (admin only)."""

from composable.api.schemas import fabric as schema
from composable.api import utils
from composable.common import exception
from composable.common import utils as common_utils
from composable import conf
from composable.db import api as db_api
from composable import fabric as fabric_drivers
from composable import policies

CONF = conf.CONF
SORT_KEYS = utils.COMMON_SORT_KEYS + ('driver',)


def render(request, fabric):
    return {
        'uuid': fabric.uuid,
        'name': fabric.name,
        'driver': fabric.driver,
        # Stored credentials are never shown back.
        'driver_info': common_utils.mask_secrets(fabric.driver_info or {}),
        'aggregate_uuid': fabric.aggregate_uuid,
        'description': fabric.description,
        'created_at': utils.isotime(fabric.created_at),
        'updated_at': utils.isotime(fabric.updated_at),
        'links': utils.self_link(request, 'fabrics', fabric.uuid),
    }


def list_fabrics(request):
    ctx = utils.context(request)
    policies.authorize('composable:fabric:list', ctx)
    query = utils.parse_query(request, ('driver',))
    page = utils.pagination(query, SORT_KEYS)
    fabrics = db_api.fabric_list(
        ctx, filters={'driver': query.get('driver')}, **page)
    items = [render(request, f) for f in fabrics]
    return utils.json_response(
        utils.collection(request, 'fabrics', items, page, query))


def show_fabric(request, ident):
    ctx = utils.context(request)
    policies.authorize('composable:fabric:get', ctx)
    utils.parse_query(request, paginate=False)
    return utils.json_response(render(request, db_api.fabric_get(ctx, ident)))


def create_fabric(request):
    ctx = utils.context(request)
    policies.authorize('composable:fabric:create', ctx)
    body = utils.read_body(request, schema.CREATE)
    utils.check_name('fabric', body['name'])
    if body['driver'] not in CONF.fabric.enabled_drivers:
        raise exception.Invalid(
            "Invalid input for field 'driver': %s is not enabled; enabled "
            "drivers: %s ([fabric]enabled_drivers)" % (
                body['driver'], ', '.join(CONF.fabric.enabled_drivers)))
    _validate_driver_info(body['driver'], body.get('driver_info') or {})
    fabric = db_api.fabric_create(ctx, body)
    fabric = db_api.fabric_get(ctx, fabric.uuid)
    return utils.json_response(
        render(request, fabric), status=201,
        headers={'Location': utils.self_link(
            request, 'fabrics', fabric.uuid)[0]['href']})


def update_fabric(request, ident):
    ctx = utils.context(request)
    policies.authorize('composable:fabric:update', ctx)
    body = utils.read_body(request, schema.UPDATE)
    fabric = db_api.fabric_get(ctx, ident)
    if 'name' in body:
        utils.check_name('fabric', body['name'])
    if 'driver_info' in body:
        body['driver_info'] = _keep_masked(fabric.driver_info or {},
                                           body['driver_info'])
        _validate_driver_info(fabric.driver, body['driver_info'])
    fabric = db_api.fabric_update(ctx, fabric.uuid, body)
    return utils.json_response(render(request, fabric))


def _validate_driver_info(driver_name, driver_info):
    """The driver's own check of its settings (400 naming the key), so a
    misconfigured fabric is refused before anything is stored. A driver
    this API cannot load is left to the conductor, which reports it on
    the first operation."""
    try:
        driver = fabric_drivers.get_driver(driver_name)
    except exception.DriverError:
        return
    driver.validate_driver_info(driver_info)


def _keep_masked(old, new):
    """A client that read driver_info and sends it back unchanged sends the
    mask, not the secret: keep the stored secret for those keys."""
    merged = {}
    for key, value in new.items():
        if value == common_utils.MASK and key in old:
            merged[key] = old[key]
        elif isinstance(value, dict) and isinstance(old.get(key), dict):
            merged[key] = _keep_masked(old[key], value)
        else:
            merged[key] = value
    return merged


def delete_fabric(request, ident):
    ctx = utils.context(request)
    policies.authorize('composable:fabric:delete', ctx)
    utils.reject_empty_body(request)
    db_api.fabric_delete(ctx, ident)
    return utils.no_content()
