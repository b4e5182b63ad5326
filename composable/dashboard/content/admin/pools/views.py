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
from composable.dashboard.content.pools import tables as pool_tables

SLUG = 'composable_admin_pools'

KIND_CHOICES = (('memory', _('Memory')), ('gpu', _('GPU')),
                ('pci', _('PCI device')))
# Empty: the API's default (network), and no field a client older than
# API 1.5 would be refused for.
MEDIUM_CHOICES = (('', _('Network (default)')),
                  ('network', _('Network: memory nodes over iSCSI')),
                  ('cxl', _('CXL: memory devices onlined as a NUMA node')))


class CreatePool(base.CreateAction):
    verbose_name = _('Create Pool')


class PoolsTable(base.InventoryTable):
    api_name = 'pool'
    panel_slug = SLUG
    name = tables.Column('name', verbose_name=_('Name'))
    kind = tables.Column('kind', verbose_name=_('Kind'))
    resource_class = tables.Column('resource_class',
                                   verbose_name=_('Resource class'))
    fabric_uuid = tables.Column('fabric_uuid', verbose_name=_('Fabric'))
    total = tables.Column('total', verbose_name=_('Total'))
    reserved = tables.Column('reserved', verbose_name=_('Reserved'))
    used = tables.Column('used', verbose_name=_('Used'))
    free = tables.Column('free', verbose_name=_('Free'))
    usage = tables.Column(pool_tables.usage_bar, verbose_name=_('Usage'))

    class Meta(object):
        name = 'pools'
        verbose_name = _('Pools')
        table_actions = (CreatePool, base.DeleteAction)
        row_actions = (base.UpdateAction, base.DeleteAction)


class UpdatePoolForm(base.InventoryForm):
    api_name = 'pool'
    noun = _('pool')
    name = forms.CharField(label=_('Name'), max_length=255)
    reserved = forms.IntegerField(
        label=_('Reserved'), min_value=0, required=False,
        help_text=_('Held back from leases: MiB for memory pools, devices '
                    'for the others.'))
    traits = forms.CharField(
        label=_('Traits'), required=False,
        help_text=_('Comma-separated, e.g. CUSTOM_GPU_A100.'))
    description = forms.CharField(label=_('Description'), max_length=255,
                                  required=False)


class CreatePoolForm(UpdatePoolForm):
    kind = forms.ThemableChoiceField(label=_('Kind'), choices=KIND_CHOICES)
    fabric = forms.CharField(label=_('Fabric'), max_length=255,
                             help_text=_('Fabric name or UUID.'))
    device_class = forms.RegexField(
        label=_('PCI device class'), regex=r'^[A-Z0-9_]+$', max_length=16,
        required=False,
        help_text=_('PCI pools only, e.g. NVME.'))
    step_size = forms.IntegerField(
        label=_('Step size (MiB)'), min_value=4, max_value=1048576,
        required=False,
        help_text=_('Memory pools only: leases are whole steps.'))
    medium = forms.ThemableChoiceField(
        label=_('Memory medium'), choices=MEDIUM_CHOICES, required=False,
        help_text=_('Memory pools only. A CXL pool is on a fabric of '
                    'driver cxl, its step size (default 256 MiB) is its '
                    'chunk, and it needs COMPOSABLE_API_VERSION 1.5 or '
                    'later.'))
    field_order = ['name', 'kind', 'fabric', 'device_class', 'traits',
                   'reserved', 'step_size', 'medium', 'description']


class IndexView(base.IndexView):
    table_class = PoolsTable
    page_title = _('Pools')


class CreateView(base.CreateView):
    form_class = CreatePoolForm
    panel_slug = SLUG
    page_title = _('Create Pool')


class UpdateView(base.UpdateView):
    form_class = UpdatePoolForm
    panel_slug = SLUG
    page_title = _('Edit Pool')
