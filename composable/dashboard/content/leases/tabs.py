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

import datetime

from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from horizon import exceptions
from horizon import tables
from horizon import tabs

from composable.dashboard.api import composable as api
from composable.dashboard.content.leases import tables as lease_tables
from composable.dashboard.content.leases import usage_chart


class ExtentsTable(tables.DataTable):
    index = tables.Column('index', verbose_name=_('#'))
    memory_node = tables.Column('memory_node',
                                verbose_name=_('Memory node'))
    size_mb = tables.Column('size_mb', verbose_name=_('Size (MiB)'))
    export_state = tables.Column('export_state',
                                 verbose_name=_('Export state'))

    def get_object_id(self, extent):
        return extent['uuid']

    class Meta(object):
        name = 'extents'
        verbose_name = _('Memory extents')


class LeaseDevicesTable(tables.DataTable):
    # The device's name where the inventory (administrators only) could be
    # read, its ID otherwise.
    name = tables.Column(lambda device: device.get('name') or device['uuid'],
                         verbose_name=_('Device'))
    kind = tables.Column('kind', verbose_name=_('Kind'))
    model = tables.Column('model', verbose_name=_('Model'))
    state = tables.Column('state', verbose_name=_('State'))
    pci_address = tables.Column('pci_address',
                                verbose_name=_('PCI address'),
                                empty_value='-')

    def get_object_id(self, device):
        return device['uuid']

    class Meta(object):
        name = 'devices'
        verbose_name = _('Devices')


class ActionsTable(tables.DataTable):
    action = tables.Column('action', verbose_name=_('Action'))
    start_time = tables.Column('start_time', verbose_name=_('Start'))
    finish_time = tables.Column('finish_time', verbose_name=_('Finish'),
                                empty_value='-')
    result = tables.Column('result', verbose_name=_('Result'))
    message = tables.WrappingColumn('message', verbose_name=_('Message'),
                                    empty_value='')
    user = tables.Column(lambda action: action.get('user_name') or
                         action.user_id, verbose_name=_('User'))
    request_id = tables.Column('request_id', verbose_name=_('Request ID'))

    def get_object_id(self, action):
        return '%s-%s' % (action.action, action.start_time)

    class Meta(object):
        name = 'actions'
        verbose_name = _('Action log')


class OverviewTab(tabs.Tab):
    name = _('Overview')
    slug = 'overview'
    template_name = 'project/composable_leases/_detail_overview.html'

    def get_context_data(self, request):
        lease = self.tab_group.kwargs['lease']
        uuids = [u for u in (lease.get('memory_pool_uuid'),
                             lease.get('device_pool_uuid')) if u]
        names = api.names_by_uuid(request, api.pool_list) if uuids else {}
        context = {'lease': lease,
                   'pools': ', '.join(names.get(u, u) for u in uuids),
                   'elastic': elastic_view(lease)}
        if lease.get('instance_uuid'):
            server = lease.instance_uuid
            context['server_name'] = (api.server_name(request, server) or
                                      server)
            context['server_url'] = reverse(
                'horizon:project:instances:detail', args=[server])
        return context


def elastic_view(lease):
    """An elastic lease's policy as the pages show it (API 1.2), None for
    a lease of fixed size."""
    policy = lease.get('elastic')
    if not policy:
        return None
    headroom = policy.get('headroom')
    return dict(policy, headroom_percent=(
        None if headroom is None else '%g%%' % (headroom * 100)))


def device_name(request, device_uuid):
    """The inventory's name of a device (its fabric address when it has
    none), or None when the inventory cannot be read."""
    try:
        device = api.device_get(request, device_uuid)
    except api.ComposableAPIError:
        return None
    return device.get('name') or device.get('address')


class _ListTab(tabs.TableTab):
    template_name = 'horizon/common/_detail_table.html'


class ExtentsTab(_ListTab):
    name = _('Memory extents')
    slug = 'extents'
    table_classes = (ExtentsTable,)

    def get_extents_data(self):
        # CHAP secrets are never part of what a project user sees; only
        # the fields the table shows are kept.
        return [dict(uuid=e['uuid'], index=e['index'],
                     memory_node=e['memory_node'], size_mb=e['size_mb'],
                     export_state=e['export_state'])
                for e in self.tab_group.kwargs['lease'].extents or []]


class DevicesTab(_ListTab):
    name = _('Devices')
    slug = 'devices'
    table_classes = (LeaseDevicesTable,)

    def get_devices_data(self):
        devices = [dict(d) for d in
                   self.tab_group.kwargs['lease'].devices or []]
        if devices and lease_tables.is_admin(self.request):
            # The lease names none of its devices; the inventory does.
            for device in devices:
                device['name'] = device_name(self.request, device['uuid'])
        return devices


class ActionLogTab(_ListTab):
    name = _('Action log')
    slug = 'actions'
    table_classes = (ActionsTable,)
    # One more API call: made when the tab is opened.
    preload = False

    def get_actions_data(self):
        lease = self.tab_group.kwargs['lease']
        try:
            actions = api.lease_action_list(self.request, lease.uuid)
        except api.ComposableAPIError:
            exceptions.handle(self.request,
                              _('Unable to retrieve the action log.'))
            return []
        # The user's own actions by the user's name; others' by their ID
        # (a project member may not read other users in Keystone).
        user = self.request.user
        for action in actions:
            if action.get('user_id') and action.user_id == user.id:
                action._apidict['user_name'] = user.username
        return actions


class UsageTab(tabs.Tab):
    name = _('Usage')
    slug = 'usage'
    template_name = 'project/composable_leases/_detail_usage.html'
    # One more API call: made when the tab is opened.
    preload = False
    #: The plot shows this much history, at most MAX_SAMPLES samples.
    WINDOW = datetime.timedelta(hours=1)
    MAX_SAMPLES = 5000

    def allowed(self, request):
        return bool(self.tab_group.kwargs['lease'].memory_mb)

    def get_context_data(self, request):
        lease = self.tab_group.kwargs['lease']
        since = (datetime.datetime.utcnow() - self.WINDOW).strftime(
            '%Y-%m-%dT%H:%M:%SZ')
        try:
            samples = api.lease_usage(request, lease.uuid, since=since,
                                      limit=self.MAX_SAMPLES)
        except api.ComposableAPIError:
            exceptions.handle(request, _('Unable to retrieve the usage.'))
            samples = []
        elastic = lease.get('elastic')
        limits = (elastic['min_mb'], elastic['max_mb']) if elastic else None
        return {'lease': lease, 'elastic': elastic,
                'chart': usage_chart.chart(samples, limits=limits)}


class LeaseDetailTabs(tabs.DetailTabsGroup):
    slug = 'lease_details'
    tabs = (OverviewTab, ExtentsTab, DevicesTab, ActionLogTab, UsageTab)
    sticky = True
