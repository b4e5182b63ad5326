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

"""``OS::Composable::Lease``: a lease of pooled memory and devices.

heat-engine loads this module from a directory in its ``plugin_dirs``
(see doc/source/user/heat.rst); :func:`resource_mapping` names the type.
"""

from heat.common import exception
from heat.common.i18n import _
from heat.engine import attributes
from heat.engine import constraints
from heat.engine import properties
from heat.engine import resource
from heat.engine import support
from oslo_log import log as logging
from oslo_utils import timeutils


LOG = logging.getLogger(__name__)

# Lease states (composable.common.states holds the authoritative table;
# heat-engine does not load the service's modules, so the few states the
# resource acts on are spelt here).
REQUESTED = 'requested'
RESERVED = 'reserved'
BOUND = 'bound'
BIND_FAILED = 'bind_failed'
UNBINDING = 'unbinding'
RELEASED = 'released'
# States in which nothing will move the lease on its own: create and
# update fail there with the lease's fault.
FAILED_STATES = frozenset(['alloc_failed', BIND_FAILED, 'error',
                           'releasing', RELEASED])
# States in which the lease may be deleted (anything resting).
DELETABLE_STATES = frozenset([REQUESTED, RESERVED, BOUND, 'alloc_failed',
                              BIND_FAILED, 'error'])

ATTACH_MODES = ('host', 'guest', 'virtio-mem')

# The elastic policy's defaults where the API needs a value (the same as
# the CLI's); the API's own default headroom applies when none is given.
DEFAULT_OBSERVATION_WINDOW = 300
DEFAULT_PREDICTION_WINDOW = 60


def _parse_time(name, value):
    try:
        return timeutils.normalize_time(timeutils.parse_isotime(value))
    except ValueError as exc:
        values = {'name': name, 'value': value, 'error': exc}
        raise exception.StackValidationFailed(
            message=_('Property %(name)s: %(value)r is not an ISO 8601 time '
                      '(%(error)s).') % values)


class Lease(resource.Resource):
    """A lease of pooled memory, GPUs or other PCIe devices.

    The lease claims capacity from composable's pools when it is created
    and, given a server or a host, is bound to it: the memory is attached
    as swap (or a guest disk with attach_mode guest) and the devices are
    hot-plugged. Creating the resource completes when the lease is
    reserved, or bound when a server or host is given; a lease the pools
    cannot hold fails with composable's explanation.

    A memory lease may be elastic: composable then grows and shrinks it
    with its use, between the elastic policy's min_mb and max_mb. A lease
    on a pool of SR-IOV virtual functions takes one virtual function
    (device_count 1, that pool in pools) and binds to the pool's host.

    The end time, the name and the description are changed in place, and
    so is the server or host the lease is bound to (the lease is unbound,
    then bound to the new one); any other change, the elastic policy's
    included (the API does not change it on a lease), replaces the
    lease.
    Suspending the stack unbinds the lease and keeps its capacity;
    resuming binds it again. Deleting unbinds and releases the lease.
    """

    support_status = support.SupportStatus(
        message=_('Provided by the composable service, not by Heat itself: '
                  'install composable in heat-engine\'s environment.'))

    default_client_name = 'composable'

    entity = 'leases'

    PROPERTIES = (
        NAME, DESCRIPTION, MEMORY, GPU_COUNT, GPU_MODEL, DEVICE_KIND,
        DEVICE_COUNT, DEVICE_TRAITS, DEVICE_UUIDS, POOLS, ATTACH_MODE,
        START, END, SERVER, HOST, ELASTIC,
    ) = (
        'name', 'description', 'memory', 'gpu_count', 'gpu_model',
        'device_kind', 'device_count', 'device_traits', 'device_uuids',
        'pools', 'attach_mode', 'start', 'end', 'server', 'host',
        'elastic',
    )

    _ELASTIC_KEYS = (
        MIN_MB, MAX_MB, OBSERVATION_WINDOW, PREDICTION_WINDOW, HEADROOM,
    ) = (
        'min_mb', 'max_mb', 'observation_window', 'prediction_window',
        'headroom',
    )

    ATTRIBUTES = (
        ID_ATTR, STATUS_ATTR, FAULT_ATTR, EXTENTS_ATTR, DEVICES_ATTR,
        HOST_ATTR, INSTANCE_ATTR, MEMORY_ATTR, ELASTIC_ATTR,
    ) = (
        'id', 'status', 'fault', 'extents', 'devices', 'host',
        'instance_uuid', 'memory_mb', 'elastic',
    )

    properties_schema = {
        NAME: properties.Schema(
            properties.Schema.STRING,
            _('Name of the lease.'),
            update_allowed=True,
        ),
        DESCRIPTION: properties.Schema(
            properties.Schema.STRING,
            _('Description of the lease.'),
            update_allowed=True,
        ),
        MEMORY: properties.Schema(
            properties.Schema.INTEGER,
            _('Memory to lease, in MiB.'),
            constraints=[constraints.Range(min=1)],
        ),
        GPU_COUNT: properties.Schema(
            properties.Schema.INTEGER,
            _('Number of GPUs to lease (the same as device_kind gpu with '
              'device_count).'),
            constraints=[constraints.Range(min=1)],
        ),
        GPU_MODEL: properties.Schema(
            properties.Schema.STRING,
            _('Model of the GPUs (or devices) wanted, e.g. A100.'),
        ),
        DEVICE_KIND: properties.Schema(
            properties.Schema.STRING,
            _('Kind of device to lease: gpu, or a PCI device class in '
              'lower case such as nvme.'),
        ),
        DEVICE_COUNT: properties.Schema(
            properties.Schema.INTEGER,
            _('Number of devices of device_kind to lease.'),
            constraints=[constraints.Range(min=1)],
        ),
        DEVICE_TRAITS: properties.Schema(
            properties.Schema.LIST,
            _('Traits the devices leased must have, e.g. '
              'CUSTOM_NVLINK.'),
            schema=properties.Schema(properties.Schema.STRING),
        ),
        DEVICE_UUIDS: properties.Schema(
            properties.Schema.LIST,
            _('These very devices (UUIDs) to lease, instead of (or as '
              'well as) device_count.'),
            schema=properties.Schema(properties.Schema.STRING),
        ),
        POOLS: properties.Schema(
            properties.Schema.LIST,
            _('Pools (names or UUIDs) to take from; default: any pool of '
              'the right kind. Without device_kind or gpu_count, the '
              'devices are of the kind the device pools named hold (a '
              'pool of SR-IOV virtual functions, say).'),
            schema=properties.Schema(
                properties.Schema.STRING,
                constraints=[constraints.CustomConstraint('composable.pool')],
            ),
        ),
        ATTACH_MODE: properties.Schema(
            properties.Schema.STRING,
            _('host: the memory and devices go to the host (memory as '
              'swap); guest: to the server bound to the lease; '
              'virtio-mem: the CXL memory of the lease is plugged into the '
              'server bound to it (a CXL pool only). Default: host.'),
            constraints=[constraints.AllowedValues(ATTACH_MODES)],
        ),
        START: properties.Schema(
            properties.Schema.STRING,
            _('When the lease starts (ISO 8601, UTC unless an offset is '
              'given); default: now. A lease that starts later cannot be '
              'bound when it is created.'),
        ),
        END: properties.Schema(
            properties.Schema.STRING,
            _('When the lease ends (ISO 8601, UTC unless an offset is '
              'given); default: never.'),
            update_allowed=True,
        ),
        SERVER: properties.Schema(
            properties.Schema.STRING,
            _('ID of the Nova server to bind the lease to (composable '
              'asks Nova where it runs).'),
            update_allowed=True,
        ),
        HOST: properties.Schema(
            properties.Schema.STRING,
            _('Host (composable host name or UUID) to bind the lease to, '
              'instead of a server.'),
            update_allowed=True,
        ),
        ELASTIC: properties.Schema(
            properties.Schema.MAP,
            _('Makes a memory lease elastic: composable predicts its use '
              'over the next prediction_window from its usage over the '
              'observation_window and resizes it, in whole extents of its '
              'pool, to the predicted peak plus headroom, between min_mb '
              'and max_mb; memory is the size it starts at. A change '
              'replaces the lease.'),
            schema={
                MIN_MB: properties.Schema(
                    properties.Schema.INTEGER,
                    _('Smallest size, in MiB.'),
                    required=True,
                ),
                MAX_MB: properties.Schema(
                    properties.Schema.INTEGER,
                    _('Largest size, in MiB.'),
                    required=True,
                ),
                OBSERVATION_WINDOW: properties.Schema(
                    properties.Schema.INTEGER,
                    _('Seconds of usage the prediction is fitted to.'),
                    default=DEFAULT_OBSERVATION_WINDOW,
                ),
                PREDICTION_WINDOW: properties.Schema(
                    properties.Schema.INTEGER,
                    _('Seconds ahead whose peak is provisioned for.'),
                    default=DEFAULT_PREDICTION_WINDOW,
                ),
                HEADROOM: properties.Schema(
                    properties.Schema.NUMBER,
                    _('Fraction of the predicted peak added on top '
                      '(composable\'s default: 0.2).'),
                ),
            },
        ),
    }

    attributes_schema = {
        ID_ATTR: attributes.Schema(
            _('UUID of the lease.'),
            type=attributes.Schema.STRING,
        ),
        STATUS_ATTR: attributes.Schema(
            _('Status of the lease: reserved, bound, ...'),
            type=attributes.Schema.STRING,
        ),
        FAULT_ATTR: attributes.Schema(
            _('Why the lease last failed, if it did.'),
            type=attributes.Schema.STRING,
        ),
        EXTENTS_ATTR: attributes.Schema(
            _('The memory extents of the lease: memory node, size in MiB '
              'and export state of each.'),
            type=attributes.Schema.LIST,
        ),
        DEVICES_ATTR: attributes.Schema(
            _('The devices of the lease: UUID, kind, model, state and PCI '
              'address of each.'),
            type=attributes.Schema.LIST,
        ),
        HOST_ATTR: attributes.Schema(
            _('Host the lease is bound to.'),
            type=attributes.Schema.STRING,
        ),
        INSTANCE_ATTR: attributes.Schema(
            _('UUID of the server the lease is bound to.'),
            type=attributes.Schema.STRING,
        ),
        MEMORY_ATTR: attributes.Schema(
            _('Size of the memory lease now, in MiB (an elastic lease '
              'changes it).'),
            type=attributes.Schema.INTEGER,
        ),
        ELASTIC_ATTR: attributes.Schema(
            _('The elastic policy of the lease, or null.'),
            type=attributes.Schema.MAP,
        ),
    }

    # -- validation ---------------------------------------------------

    def validate(self):
        super(Lease, self).validate()
        props = self.properties
        gpus = props[self.GPU_COUNT]
        kind = props[self.DEVICE_KIND] or None
        if gpus is not None:
            if props[self.DEVICE_COUNT] is not None:
                raise exception.ResourcePropertyConflict(self.GPU_COUNT,
                                                         self.DEVICE_COUNT)
            if kind not in (None, 'gpu'):
                raise exception.StackValidationFailed(
                    message=_('gpu_count asks for GPUs but device_kind is '
                              '%s.') % kind)
        named = props[self.DEVICE_UUIDS]
        if (props[self.MEMORY] is None and gpus is None and
                props[self.DEVICE_COUNT] is None and not named):
            raise exception.PropertyUnspecifiedError(
                self.MEMORY, self.GPU_COUNT, self.DEVICE_COUNT,
                self.DEVICE_UUIDS)
        if (gpus is None and props[self.DEVICE_COUNT] is None and
                not named and (kind is not None or props[self.GPU_MODEL] or
                               props[self.DEVICE_TRAITS])):
            raise exception.StackValidationFailed(
                message=_('device_kind, gpu_model and device_traits filter '
                          'the devices leased: give gpu_count or '
                          'device_count too.'))
        if props[self.ELASTIC] and props[self.MEMORY] is None:
            raise exception.StackValidationFailed(
                message=_('elastic makes a memory lease elastic: give '
                          'memory (the size it starts at).'))
        if props[self.SERVER] and props[self.HOST]:
            raise exception.ResourcePropertyConflict(self.SERVER, self.HOST)
        if props[self.ATTACH_MODE] in ('guest', 'virtio-mem') and \
                not props[self.SERVER]:
            raise exception.StackValidationFailed(
                message=_('attach_mode %s attaches to a server: give '
                          'the server property.') % props[self.ATTACH_MODE])
        start = end = None
        if props[self.START]:
            start = _parse_time(self.START, props[self.START])
        if props[self.END]:
            end = _parse_time(self.END, props[self.END])
        if start is not None and end is not None and end <= start:
            raise exception.StackValidationFailed(
                message=_('The end of the lease (%(end)s) must be after its '
                          'start (%(start)s).') % {
                              'end': props[self.END],
                              'start': props[self.START]})
        if (start is not None and start > timeutils.utcnow() and
                self._target(props) is not None):
            raise exception.StackValidationFailed(
                message=_('A lease that starts later (%s) cannot be bound '
                          'when it is created: drop server and host, or '
                          'the start.') % props[self.START])

    # -- helpers --------------------------------------------------------

    def _target(self, props):
        """What the lease is to be bound to: {'server': ...} or
        {'host': ...}, or None."""
        # Heat gives an unset string property as None, or '' when a
        # template function resolved to null.
        if props[self.SERVER]:
            return {'server': props[self.SERVER]}
        if props[self.HOST]:
            return {'host': props[self.HOST]}
        return None

    def _lease_fields(self):
        props = self.properties
        fields = {}
        for prop, field in ((self.NAME, 'name'),
                            (self.DESCRIPTION, 'description'),
                            (self.MEMORY, 'memory_mb'),
                            (self.GPU_MODEL, 'device_model'),
                            (self.DEVICE_KIND, 'device_kind'),
                            (self.DEVICE_COUNT, 'device_count'),
                            (self.DEVICE_TRAITS, 'device_traits'),
                            (self.DEVICE_UUIDS, 'device_uuids'),
                            (self.POOLS, 'pools'),
                            (self.ATTACH_MODE, 'attach_mode'),
                            (self.START, 'start_at'),
                            (self.END, 'end_at')):
            # Unset, null and empty are all "not given".
            if props[prop] not in (None, '', []):
                fields[field] = props[prop]
        if not fields.get('name'):
            fields['name'] = self.physical_resource_name()
        if props[self.GPU_COUNT] is not None:
            fields['device_kind'] = 'gpu'
            fields['device_count'] = props[self.GPU_COUNT]
        if props[self.ELASTIC]:
            fields['elastic'] = {
                key: value for key, value in props[self.ELASTIC].items()
                if value is not None}
        return fields

    def _get_lease(self, lease_id=None):
        return self.client().leases.get(lease_id or self.resource_id)

    @staticmethod
    def _failed(lease):
        return exception.ResourceInError(
            resource_status=lease['status'],
            status_reason=lease.get('fault') or _('composable gave no '
                                                  'reason'))

    def _bind(self, lease_id, target):
        LOG.info('Binding composable lease %(lease)s of %(res)s to '
                 '%(target)s', {'lease': lease_id, 'res': self.name,
                                'target': target})
        self.client().leases.bind(lease_id, **target)

    def _progress(self, job):
        """One step towards ``job['target']`` (bound to it, or just
        reserved when it is None). True when there."""
        lease = self._get_lease(job['id'])
        status = lease['status']
        target = job['target']
        if status in FAILED_STATES:
            raise self._failed(lease)
        if target is None:
            return status in (RESERVED, REQUESTED, BOUND)
        if status == BOUND:
            return True
        if status == RESERVED and not job.get('bind_sent'):
            self._bind(job['id'], target)
            job['bind_sent'] = True
        return False

    # -- create ---------------------------------------------------------

    def handle_create(self):
        # Without device_kind, composable takes the kind of the device
        # pools named (an SR-IOV pool's nic), as for any other client.
        fields = self._lease_fields()
        lease = self.client().leases.create(**fields)
        self.resource_id_set(lease['uuid'])
        return {'id': lease['uuid'],
                'target': self._target(self.properties),
                'bind_sent': False}

    def check_create_complete(self, job):
        return self._progress(job)

    # -- update ---------------------------------------------------------

    def handle_update(self, json_snippet, tmpl_diff, prop_diff):
        if not prop_diff:
            return None
        changes = {}
        for prop, field in ((self.NAME, 'name'),
                            (self.DESCRIPTION, 'description'),
                            (self.END, 'end_at')):
            if prop in prop_diff:
                changes[field] = prop_diff[prop]
        if self.END in changes:
            # Unset (or null) is no end.
            changes['end_at'] = changes['end_at'] or None
            if changes['end_at']:
                _parse_time(self.END, changes['end_at'])
        if self.NAME in changes and not changes['name']:
            changes['name'] = self.physical_resource_name()
        if changes:
            self.client().leases.update(self.resource_id, **changes)
        if self.SERVER not in prop_diff and self.HOST not in prop_diff:
            return None
        new_props = json_snippet.properties(self.properties_schema,
                                            self.context)
        target = self._target(new_props)
        lease = self._get_lease()
        job = {'id': self.resource_id, 'target': target, 'bind_sent': False}
        if lease['status'] in (BOUND, BIND_FAILED):
            LOG.info('Unbinding composable lease %(lease)s of %(res)s',
                     {'lease': self.resource_id, 'res': self.name})
            self.client().leases.unbind(self.resource_id)
            job['unbind'] = True
        return job

    def check_update_complete(self, job):
        if job is None:
            return True
        if job.get('unbind'):
            # The lease leaves its old server or host first.
            lease = self._get_lease(job['id'])
            if lease['status'] in (BOUND, UNBINDING):
                return False
            if lease['status'] != RESERVED:
                raise self._failed(lease)
            job['unbind'] = False
        return self._progress(job)

    # -- suspend / resume ------------------------------------------------

    def handle_suspend(self):
        """Unbind a bound lease; its capacity stays reserved."""
        if self.resource_id is None:
            return None
        lease = self._get_lease()
        if lease['status'] not in (BOUND, BIND_FAILED):
            return None
        self.client().leases.unbind(self.resource_id)
        return {'id': self.resource_id, 'target': None, 'unbind': True}

    def check_suspend_complete(self, job):
        if job is None:
            return True
        lease = self._get_lease(job['id'])
        if lease['status'] in (BOUND, UNBINDING):
            return False
        if lease['status'] != RESERVED:
            raise self._failed(lease)
        return True

    def handle_resume(self):
        """Bind the lease again to its server or host."""
        target = self._target(self.properties)
        if self.resource_id is None or target is None:
            return None
        return {'id': self.resource_id, 'target': target,
                'bind_sent': False}

    def check_resume_complete(self, job):
        if job is None:
            return True
        return self._progress(job)

    # -- delete ----------------------------------------------------------

    def _send_delete(self, lease_id):
        """True when the lease is being released (or is gone)."""
        try:
            self.client().leases.delete(lease_id)
        except Exception as ex:
            plugin = self.client_plugin()
            if plugin.is_not_found(ex):
                return True
            if plugin.is_conflict(ex):
                # Busy (allocating, binding, unbinding): asked again
                # when it rests.
                LOG.info('Composable lease %(lease)s is busy, deleting it '
                         'when it rests: %(error)s',
                         {'lease': lease_id, 'error': ex})
                return False
            raise
        return True

    def handle_delete(self):
        if self.resource_id is None:
            return None
        return {'id': self.resource_id,
                'sent': self._send_delete(self.resource_id)}

    def check_delete_complete(self, job):
        if job is None:
            return True
        try:
            lease = self._get_lease(job['id'])
        except Exception as ex:
            self.client_plugin().ignore_not_found(ex)
            return True
        status = lease['status']
        if status == RELEASED:
            return True
        if job['sent'] and status == 'error':
            raise self._failed(lease)
        if not job['sent'] and status in DELETABLE_STATES:
            job['sent'] = self._send_delete(job['id'])
        return False

    # -- check, show, attributes -----------------------------------------

    def handle_check(self):
        lease = self._get_lease()
        expected = [BOUND] if self._target(self.properties) else [
            REQUESTED, RESERVED, BOUND]
        self._verify_check_conditions([{
            'attr': 'status', 'expected': expected,
            'current': lease['status']}])

    def _show_resource(self):
        return self._get_lease()

    def _resolve_attribute(self, name):
        if self.resource_id is None:
            return None
        lease = self._get_lease()
        if name == self.ID_ATTR:
            return lease['uuid']
        return lease.get(name)

    def parse_live_resource_data(self, resource_properties, resource_data):
        return {
            self.NAME: resource_data.get('name'),
            self.DESCRIPTION: resource_data.get('description'),
            self.END: resource_data.get('end_at'),
        }


def resource_mapping():
    return {'OS::Composable::Lease': Lease}
