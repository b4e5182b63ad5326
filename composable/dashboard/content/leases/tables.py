#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext_lazy
from horizon import exceptions
from horizon import tables
from horizon.templatetags import sizeformat

from composable.common import states
from composable.dashboard.api import composable as api
from composable.dashboard import utils

# Statuses a lease rests in: True for the good ones, False for failures.
# A lease in any other status (allocating, binding, unbinding, releasing)
# has its row refreshed by the table's ajax update until it rests.
STATUS_CHOICES = (
    (states.REQUESTED, True),
    (states.RESERVED, True),
    (states.BOUND, True),
    (states.RELEASED, True),
    (states.ALLOC_FAILED, False),
    (states.BIND_FAILED, False),
    (states.ERROR, False),
)

STATUS_DISPLAY_CHOICES = (
    (states.REQUESTED, _('Requested')),
    (states.ALLOCATING, _('Allocating')),
    (states.RESERVED, _('Reserved')),
    (states.BINDING, _('Binding')),
    (states.BOUND, _('Bound')),
    (states.UNBINDING, _('Unbinding')),
    (states.RELEASING, _('Releasing')),
    (states.RELEASED, _('Released')),
    (states.ALLOC_FAILED, _('Allocation failed')),
    (states.BIND_FAILED, _('Bind failed')),
    (states.ERROR, _('Error')),
)


def allows(lease, event):
    """Whether the lease state machine takes ``event`` in this status."""
    return any(source == lease.status and name == event
               for source, name, _target in states.TRANSITIONS)


class CreateLease(tables.LinkAction):
    name = 'create'
    verbose_name = _('Create Lease')
    url = 'horizon:project:composable_leases:create'
    classes = ('ajax-modal',)
    icon = 'plus'


class BindLease(tables.LinkAction):
    name = 'bind'
    verbose_name = _('Bind to Server')
    url = 'horizon:project:composable_leases:bind'
    classes = ('ajax-modal',)
    icon = 'link'

    def allowed(self, request, lease=None):
        return lease is None or allows(lease, states.BIND)


def is_admin(request):
    return request.user.has_perms(('openstack.roles.admin',))


class BindHostLease(tables.LinkAction):
    name = 'bind_host'
    verbose_name = _('Bind to Host')
    url = 'horizon:project:composable_leases:bind_host'
    classes = ('ajax-modal',)
    icon = 'server'

    def allowed(self, request, lease=None):
        # The form lists the inventory's hosts, which only administrators
        # may read.
        return is_admin(request) and (lease is None or
                                      allows(lease, states.BIND))


class ExtendLease(tables.LinkAction):
    name = 'extend'
    verbose_name = _('Extend Lease')
    url = 'horizon:project:composable_leases:extend'
    classes = ('ajax-modal',)
    icon = 'clock-o'

    def allowed(self, request, lease=None):
        return lease is None or lease.status not in (states.RELEASING,
                                                     states.RELEASED)


class UnbindLease(tables.BatchAction):
    name = 'unbind'
    icon = 'unlink'
    classes = ('btn-danger',)

    @staticmethod
    def action_present(count):
        return ngettext_lazy('Unbind Lease', 'Unbind Leases', count)

    @staticmethod
    def action_past(count):
        return ngettext_lazy('Unbinding of lease requested',
                             'Unbinding of leases requested', count)

    def allowed(self, request, lease=None):
        return lease is None or allows(lease, states.UNBIND)

    def action(self, request, obj_id):
        utils.call_reporting_failure(
            self.table, request, obj_id, api.lease_unbind,
            _('Unable to unbind lease %(name)s: %(reason)s'))


class DeleteLease(tables.DeleteAction):

    @staticmethod
    def action_present(count):
        return ngettext_lazy('Delete Lease', 'Delete Leases', count)

    @staticmethod
    def action_past(count):
        return ngettext_lazy('Deletion of lease requested',
                             'Deletion of leases requested', count)

    def allowed(self, request, lease=None):
        return lease is None or allows(lease, states.DELETE)

    def delete(self, request, obj_id):
        utils.call_reporting_failure(
            self.table, request, obj_id, api.lease_delete,
            _('Unable to delete lease %(name)s: %(reason)s'))


class LeaseFilterAction(tables.FilterAction):
    # The API filters: the whole list is never fetched to filter here.
    filter_type = 'server'
    filter_choices = (
        ('name', _('Name ='), True),
        ('status', _('Status ='), True,
         _('One status or several, comma-separated, e.g. bound,reserved')),
        ('kind', _('Kind ='), True, _('memory, gpu or a device kind')),
        ('pool', _('Pool ='), True, _('Pool name or ID')),
        ('host', _('Host ='), True),
    )


class UpdateRow(tables.Row):
    ajax = True

    def get_data(self, request, lease_id):
        lease = api.lease_get(request, lease_id)
        # A row update renders this row alone: the index view, which
        # loads the pool names for the whole table, does not run.
        if lease.memory_pool_uuid or lease.device_pool_uuid:
            add_pool_names(lease, load_pool_names(request))
        add_server_names(request, [lease])
        return lease


def add_pool_names(lease, pool_names):
    """Give the lease a ``pools`` attribute naming its pools."""
    uuids = [u for u in (lease.memory_pool_uuid, lease.device_pool_uuid) if u]
    lease._apidict['pools'] = ', '.join(pool_names.get(u, u) for u in uuids)


def memory(lease):
    if not lease.memory_mb:
        return '-'
    return sizeformat.mb_float_format(lease.memory_mb)


def devices(lease):
    if not lease.device_count:
        return '-'
    what = ' '.join(x for x in (lease.device_kind, lease.device_model) if x)
    return '%d \u00d7 %s' % (lease.device_count, what)


def add_server_names(request, leases):
    """Give each lease bound to a server a ``server_name``: the name Nova
    has for it, its ID when Nova cannot say (one Nova call, none when no
    lease has a server)."""
    if not any(lease.instance_uuid for lease in leases):
        return
    names = api.server_names(request)
    for lease in leases:
        if lease.instance_uuid:
            lease._apidict['server_name'] = (names.get(lease.instance_uuid) or
                                             lease.instance_uuid)


def consumer(lease):
    if lease.instance_uuid:
        return lease.get('server_name') or lease.instance_uuid
    return lease.host or '-'


class LeasesTable(tables.DataTable):
    name = tables.WrappingColumn(
        'display_name', verbose_name=_('Name'),
        link='horizon:project:composable_leases:detail')
    status = tables.Column(
        'status', verbose_name=_('Status'), status=True,
        status_choices=STATUS_CHOICES,
        display_choices=STATUS_DISPLAY_CHOICES)
    fault = tables.WrappingColumn(
        lambda lease: lease.fault or '', verbose_name=_('Fault'),
        truncate=80)
    memory = tables.Column(memory, verbose_name=_('Memory'))
    devices = tables.Column(devices, verbose_name=_('Devices'))
    pools = tables.Column('pools', verbose_name=_('Pool'))
    consumer = tables.Column(consumer, verbose_name=_('Host / Server'))
    start_at = tables.Column('start_at', verbose_name=_('Start'),
                             empty_value=_('Now'))
    end_at = tables.Column('end_at', verbose_name=_('End'),
                           empty_value=_('None'))

    def get_object_id(self, lease):
        return lease.uuid

    def get_object_display(self, lease):
        return lease.display_name

    class Meta(object):
        name = 'leases'
        verbose_name = _('Leases')
        status_columns = ['status']
        row_class = UpdateRow
        table_actions = (CreateLease, DeleteLease, LeaseFilterAction)
        row_actions = (BindLease, BindHostLease, UnbindLease, ExtendLease,
                       DeleteLease)


def detail_url(lease_id):
    return reverse('horizon:project:composable_leases:detail',
                   args=[lease_id])


def load_pool_names(request):
    """UUID -> name of the pools, or {} (with a message) if unavailable."""
    try:
        return {pool.uuid: pool.name for pool in api.pool_list(request)}
    except api.ComposableAPIError:
        exceptions.handle(request, _('Unable to retrieve the pools.'))
        return {}
