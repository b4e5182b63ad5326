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

"""A small Placement report client for composable.

Every pool is one *sharing* resource provider (trait
``MISC_SHARES_VIA_AGGREGATE``) in the aggregate of the hosts that reach its
fabric, so Nova's scheduler can take pool capacity for an instance on any
of those hosts; except a pool of SR-IOV virtual functions, whose provider
is a child of the compute node provider of the physical function's host
(see composable.conductor.placement.sync). Every lease is a Placement
*consumer* (consumer uuid = lease uuid, consumer type
``COMPOSABLE_LEASE``) holding the capacity the allocator claimed for it,
so Nova can never oversubscribe a pool.

Writes that race with someone else (409 ``placement.concurrent_update``:
the provider or consumer generation moved between our read and our write)
are retried a bounded number of times, each time after reading the
generation again.

The client talks through a keystoneauth1 ``Adapter``; each call names its
own microversion:

* 1.7   PUT /resource_classes/{name} (create if missing, idempotent)
* 1.6   PUT /traits/{name}, GET/PUT provider traits
* 1.19  GET/PUT provider aggregates (with the provider generation)
* 1.20  POST /resource_providers returns the provider (with a parent)
* 1.37  PUT /resource_providers/{uuid} may change the parent
* 1.18  GET /resource_providers?required=... (a trait filter)
* 1.38  allocations with consumer generations (>= 1.28) and consumer types
"""

import time
from urllib import parse as urlparse

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exc
from oslo_log import log as logging
from oslo_utils import uuidutils

from composable.common import exception
from composable.common import keystone
from composable.common import resource_classes

LOG = logging.getLogger(__name__)

PROVIDER_PREFIX = 'composable-pool-'
CONSUMER_TYPE = 'COMPOSABLE_LEASE'

CONCURRENT_UPDATE = 'placement.concurrent_update'
DUPLICATE_NAME = 'placement.duplicate_name'

MV_RESOURCE_CLASS = '1.7'
MV_TRAITS = '1.6'
MV_AGGREGATES = '1.19'
MV_PROVIDERS = '1.20'
MV_REPARENT = '1.37'
MV_PROVIDER_QUERY = '1.18'
MV_INVENTORY = '1.26'
MV_ALLOCATIONS = '1.38'

DEFAULT_RETRIES = 5


class PlacementError(exception.ComposableException):
    msg_fmt = 'Placement said %(status)s to %(method)s %(url)s: %(detail)s'
    code = 502
    error_code = 'composable.placement.error'

    def __init__(self, message=None, status=None, error_code=None,
                 **kwargs):
        self.status = status
        self.placement_code = error_code
        super().__init__(message, status=status, **kwargs)


class PlacementUnavailable(PlacementError):
    msg_fmt = 'Placement cannot be reached: %(reason)s'
    code = 503
    error_code = 'composable.placement.unavailable'


class GenerationConflict(PlacementError):
    msg_fmt = ('%(what)s kept changing under us: gave up after %(attempts)d '
               'attempts.')
    code = 409
    error_code = 'composable.placement.generation_conflict'


class ProviderInUse(PlacementError):
    msg_fmt = ('Resource provider %(uuid)s still holds allocations of '
               '%(consumers)s.')
    code = 409
    error_code = 'composable.placement.provider_in_use'


def provider_name(pool_name):
    return PROVIDER_PREFIX + pool_name


def _error(resp):
    """(code, detail) of a Placement error response."""
    try:
        err = resp.json()['errors'][0]
        return err.get('code'), err.get('detail') or err.get('title')
    except Exception:
        return None, resp.text[:200]


class ReportClient(object):
    """Placement calls composable needs, over a keystoneauth1 Adapter."""

    def __init__(self, adapter, retries=DEFAULT_RETRIES, retry_delay=0.05):
        self.adapter = adapter
        self.retries = retries
        self.retry_delay = retry_delay

    @classmethod
    def from_conf(cls, conf=None):
        """A client configured from composable's ``[placement]`` group."""
        from keystoneauth1 import loading as ks_loading
        if conf is None:
            from composable import conf as composable_conf
            conf = composable_conf.CONF
        group = conf.placement
        auth = ks_loading.load_auth_from_conf_options(conf, 'placement')
        session = ks_loading.load_session_from_conf_options(
            conf, 'placement', auth=auth)
        adapter = ks_adapter.Adapter(
            session, auth=auth, interface=group.valid_interfaces,
            **keystone.adapter_options(group))
        return cls(adapter, retries=group.composable_generation_retries)

    # ------------------------------------------------------------ plumbing

    def _call(self, method, url, version, body=None, ok=(200,),
              missing_ok=False, global_request_id=None):
        """Do one request; the decoded body (or None), or raise.

        404 returns None when ``missing_ok``; any other status not in
        ``ok`` raises PlacementError with Placement's error code.
        """
        kwargs = {'microversion': version, 'raise_exc': False,
                  'headers': {'Accept': 'application/json'}}
        if body is not None:
            kwargs['json'] = body
        if global_request_id:
            kwargs['global_request_id'] = global_request_id
        try:
            resp = self.adapter.request(url, method, **kwargs)
        except ks_exc.ClientException as err:
            raise PlacementUnavailable(reason=str(err))
        if resp.status_code in ok:
            if resp.status_code == 204 or not resp.content:
                return None
            return resp.json()
        if resp.status_code == 404 and missing_ok:
            return None
        code, detail = _error(resp)
        raise PlacementError(status=resp.status_code, error_code=code,
                             method=method, url=url, detail=detail)

    def _retrying(self, what, attempt_fn):
        """Run ``attempt_fn`` until it does not hit a generation conflict,
        at most ``retries`` + 1 times."""
        attempts = self.retries + 1
        for attempt in range(1, attempts + 1):
            try:
                return attempt_fn()
            except PlacementError as err:
                if (err.status != 409 or
                        err.placement_code != CONCURRENT_UPDATE):
                    raise
                LOG.info('Generation conflict on %s (attempt %d of %d); '
                         'reading it again.', what, attempt, attempts)
                if attempt < attempts and self.retry_delay:
                    time.sleep(self.retry_delay * attempt)
        raise GenerationConflict(status=409, error_code=CONCURRENT_UPDATE,
                                 what=what, attempts=attempts)

    # ------------------------------------------------------------ classes

    def ensure_resource_class(self, name):
        """Create custom resource class ``name`` unless it exists."""
        if not resource_classes.is_custom(name):
            return  # standard classes always exist
        self._call('PUT', '/resource_classes/%s' % name, MV_RESOURCE_CLASS,
                   ok=(201, 204))

    def ensure_traits(self, traits):
        """Create the custom traits among ``traits`` unless they exist."""
        for trait in traits:
            if resource_classes.is_custom_trait(trait):
                self._call('PUT', '/traits/%s' % trait, MV_TRAITS,
                           ok=(201, 204))

    # ------------------------------------------------------------ providers

    def get_provider(self, uuid):
        return self._call('GET', '/resource_providers/%s' % uuid,
                          MV_PROVIDERS, missing_ok=True)

    def get_provider_by_name(self, name):
        found = self._call('GET', '/resource_providers?name=%s' %
                           urlparse.quote(name, safe=''), MV_PROVIDERS)
        providers = found['resource_providers']
        return providers[0] if providers else None

    def list_providers(self,
                       required_trait=resource_classes.POOL_TRAIT):
        """Providers carrying ``required_trait`` (composable's own)."""
        # Placement refuses to filter on a trait it does not know.
        self.ensure_traits([required_trait])
        found = self._call(
            'GET', '/resource_providers?required=%s' % required_trait,
            MV_PROVIDER_QUERY)
        return found['resource_providers']

    def create_provider(self, uuid, name, parent_provider_uuid=None):
        body = {'uuid': uuid, 'name': name}
        if parent_provider_uuid:
            body['parent_provider_uuid'] = parent_provider_uuid
        return self._call('POST', '/resource_providers', MV_PROVIDERS,
                          body=body, ok=(200,))

    def set_parent(self, uuid, name, parent_provider_uuid):
        """Put the provider under ``parent_provider_uuid``, wherever it
        was (a provider without a parent may be given one at any version;
        moving it from one parent to another needs 1.37)."""
        return self._call('PUT', '/resource_providers/%s' % uuid,
                          MV_REPARENT, body={
                              'name': name,
                              'parent_provider_uuid': parent_provider_uuid})

    def rename_provider(self, uuid, name):
        return self._call('PUT', '/resource_providers/%s' % uuid,
                          MV_PROVIDERS, body={'name': name})

    def delete_provider(self, uuid):
        """Delete a provider; True if it existed. ProviderInUse when
        allocations remain on it."""
        try:
            self._call('DELETE', '/resource_providers/%s' % uuid,
                       MV_PROVIDERS, ok=(204,))
        except PlacementError as err:
            if err.status == 404:
                return False
            if err.status == 409:
                consumers = sorted(self.get_provider_allocations(uuid))
                raise ProviderInUse(status=409, uuid=uuid,
                                    consumers=', '.join(consumers))
            raise
        return True

    def get_traits(self, uuid):
        got = self._call('GET', '/resource_providers/%s/traits' % uuid,
                         MV_TRAITS)
        return got['resource_provider_generation'], set(got['traits'])

    def set_traits(self, uuid, traits):
        """Make the provider's traits exactly ``traits``; True if changed."""
        traits = set(traits)
        self.ensure_traits(sorted(traits))

        def attempt():
            generation, current = self.get_traits(uuid)
            if current == traits:
                return False
            self._call('PUT', '/resource_providers/%s/traits' % uuid,
                       MV_TRAITS, body={
                           'resource_provider_generation': generation,
                           'traits': sorted(traits)})
            return True
        return self._retrying('traits of provider %s' % uuid, attempt)

    def get_aggregates(self, uuid):
        got = self._call('GET', '/resource_providers/%s/aggregates' % uuid,
                         MV_AGGREGATES)
        return got['resource_provider_generation'], set(got['aggregates'])

    def set_aggregates(self, uuid, aggregates):
        """Make the provider's aggregates exactly ``aggregates``."""
        aggregates = set(aggregates)

        def attempt():
            generation, current = self.get_aggregates(uuid)
            if current == aggregates:
                return False
            self._call('PUT', '/resource_providers/%s/aggregates' % uuid,
                       MV_AGGREGATES, body={
                           'resource_provider_generation': generation,
                           'aggregates': sorted(aggregates)})
            return True
        return self._retrying('aggregates of provider %s' % uuid, attempt)

    def get_inventories(self, uuid):
        got = self._call('GET', '/resource_providers/%s/inventories' % uuid,
                         MV_INVENTORY)
        return got['resource_provider_generation'], got['inventories']

    def set_inventories(self, uuid, inventories):
        """Make the provider's inventories exactly ``inventories``
        ({resource_class: {total, reserved, ...}}); True if changed."""
        for rc in inventories:
            self.ensure_resource_class(rc)

        def attempt():
            generation, current = self.get_inventories(uuid)
            if _same_inventories(current, inventories):
                return False
            self._call('PUT', '/resource_providers/%s/inventories' % uuid,
                       MV_INVENTORY, body={
                           'resource_provider_generation': generation,
                           'inventories': inventories})
            return True
        return self._retrying('inventory of provider %s' % uuid, attempt)

    def get_usages(self, uuid):
        got = self._call('GET', '/resource_providers/%s/usages' % uuid,
                         MV_INVENTORY)
        return got['usages']

    def get_provider_allocations(self, uuid):
        """{consumer uuid: {resource class: amount}} on one provider."""
        got = self._call('GET', '/resource_providers/%s/allocations' % uuid,
                         MV_ALLOCATIONS, missing_ok=True)
        if got is None:
            return {}
        return {consumer: alloc['resources']
                for consumer, alloc in got['allocations'].items()}

    # ------------------------------------------------------------ consumers

    def get_allocations(self, consumer):
        """The consumer's allocations: {'allocations': {rp: {'resources':
        {...}}}, 'consumer_generation': int or None, 'project_id', ...}."""
        got = self._call('GET', '/allocations/%s' % consumer,
                         MV_ALLOCATIONS)
        got.setdefault('consumer_generation', None)
        return got

    def put_allocations(self, consumer, resources, project_id, user_id,
                        consumer_type=CONSUMER_TYPE):
        """Make ``consumer`` hold exactly ``resources`` ({provider uuid:
        {resource class: amount}}), retrying generation conflicts.

        Returns True when Placement was changed.
        """
        wanted = {rp: {'resources': dict(res)}
                  for rp, res in resources.items() if res}

        def attempt():
            current = self.get_allocations(consumer)
            if (current['allocations'] and
                    _same_allocations(current['allocations'], wanted)):
                return False
            body = {'allocations': wanted,
                    'consumer_generation': current['consumer_generation'],
                    'project_id': project_id,
                    'user_id': user_id or project_id,
                    'consumer_type': consumer_type}
            self._call('PUT', '/allocations/%s' % consumer, MV_ALLOCATIONS,
                       body=body, ok=(204,))
            return True
        return self._retrying('allocations of consumer %s' % consumer,
                              attempt)

    def delete_consumer(self, consumer):
        """Remove every allocation of ``consumer`` in one request, whatever
        its generation (for a consumer only composable writes: a released
        lease); True if it had any."""
        try:
            self._call('DELETE', '/allocations/%s' % consumer,
                       MV_ALLOCATIONS, ok=(204,))
        except PlacementError as err:
            if err.status == 404:
                return False
            raise
        return True

    def delete_allocations(self, consumer):
        """Remove every allocation of ``consumer``; True if it had any."""
        def attempt():
            current = self.get_allocations(consumer)
            if not current['allocations']:
                return False
            # An empty allocation set with the consumer generation deletes
            # the allocations only if nobody changed them meanwhile.
            self._call('PUT', '/allocations/%s' % consumer, MV_ALLOCATIONS,
                       body={'allocations': {},
                             'consumer_generation':
                                 current['consumer_generation'],
                             'project_id': current['project_id'],
                             'user_id': current['user_id'],
                             'consumer_type': current.get(
                                 'consumer_type') or CONSUMER_TYPE},
                       ok=(204,))
            return True
        return self._retrying('allocations of consumer %s' % consumer,
                              attempt)


def _same_inventories(current, wanted):
    if set(current) != set(wanted):
        return False
    for rc, inv in wanted.items():
        have = current[rc]
        if any(have.get(key) != value for key, value in inv.items()):
            return False
    return True


def _same_allocations(current, wanted):
    have = {rp: dict(alloc['resources']) for rp, alloc in current.items()}
    want = {rp: dict(alloc['resources']) for rp, alloc in wanted.items()}
    return have == want


def new_provider_uuid():
    return uuidutils.generate_uuid()
