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

from django.utils.translation import gettext_lazy as _
from horizon import forms
from horizon import tables

from composable.dashboard.content.admin import base

SLUG = 'composable_admin_hosts'


class CreateHost(base.CreateAction):
    verbose_name = _('Create Host')


class HostsTable(base.InventoryTable):
    api_name = 'host'
    panel_slug = SLUG
    named = {'fabric_uuid': 'fabric'}
    name = tables.Column('name', verbose_name=_('Name'))
    fabric = tables.Column('fabric_name', verbose_name=_('Fabric'))
    initiator_iqn = tables.Column('initiator_iqn',
                                  verbose_name=_('Initiator IQN'),
                                  empty_value='-')
    partition_id = tables.Column('partition_id',
                                 verbose_name=_('Partition'),
                                 empty_value='-')

    class Meta(object):
        name = 'hosts'
        verbose_name = _('Hosts')
        table_actions = (CreateHost, base.DeleteAction)
        row_actions = (base.UpdateAction, base.DeleteAction)


class UpdateHostForm(base.InventoryForm):
    api_name = 'host'
    noun = _('host')
    initiator_iqn = forms.CharField(label=_('iSCSI initiator IQN'),
                                    max_length=223, required=False)
    partition_id = forms.CharField(
        label=_('Switch partition'), max_length=255, required=False,
        help_text=_('Its port or partition on the PCIe fabric.'))


class CreateHostForm(UpdateHostForm):
    name = forms.CharField(
        label=_('Name'), max_length=255,
        help_text=_("The Nova compute service's host name."))
    fabric = forms.CharField(label=_('Fabric'), max_length=255,
                             help_text=_('Fabric name or UUID.'))
    field_order = ['name', 'fabric', 'initiator_iqn', 'partition_id']


class IndexView(base.IndexView):
    table_class = HostsTable
    page_title = _('Hosts')


class CreateView(base.CreateView):
    form_class = CreateHostForm
    panel_slug = SLUG
    page_title = _('Create Host')


class UpdateView(base.UpdateView):
    form_class = UpdateHostForm
    panel_slug = SLUG
    page_title = _('Edit Host')
