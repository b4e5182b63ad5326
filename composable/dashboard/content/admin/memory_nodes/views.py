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

SLUG = 'composable_admin_memory_nodes'

TRANSPORT_CHOICES = (('tcp', _('TCP')), ('iser', _('iSER (RDMA)')))


class CreateMemoryNode(base.CreateAction):
    verbose_name = _('Create Memory Node')


class MemoryNodesTable(base.InventoryTable):
    api_name = 'memory_node'
    panel_slug = SLUG
    named = {'pool_uuid': 'pool'}
    name = tables.Column('name', verbose_name=_('Name'))
    pool = tables.Column('pool_name', verbose_name=_('Pool'))
    capacity_mb = tables.Column('capacity_mb',
                                verbose_name=_('Capacity (MiB)'))
    reserved_mb = tables.Column('reserved_mb',
                                verbose_name=_('Reserved (MiB)'))
    allocated_mb = tables.Column('allocated_mb',
                                 verbose_name=_('Allocated (MiB)'))
    exporter = tables.Column('exporter', verbose_name=_('Exporter'))
    portal = tables.Column('portal', verbose_name=_('Portal'),
                           empty_value='-')
    transport = tables.Column('transport', verbose_name=_('Transport'))
    enabled = tables.Column('enabled', verbose_name=_('Enabled'),
                            filters=(lambda v: _('Yes') if v else _('No'),))

    class Meta(object):
        name = 'memory_nodes'
        verbose_name = _('Memory Nodes')
        table_actions = (CreateMemoryNode, base.DeleteAction)
        row_actions = (base.UpdateAction, base.DeleteAction)


class UpdateMemoryNodeForm(base.InventoryForm):
    api_name = 'memory_node'
    noun = _('memory node')
    capacity_mb = forms.IntegerField(label=_('Capacity (MiB)'), min_value=1)
    reserved_mb = forms.IntegerField(
        label=_('Reserved (MiB)'), min_value=0, required=False,
        help_text=_('Kept for the node itself, never leased.'))
    portal = forms.CharField(label=_('iSCSI portal'), max_length=255,
                             required=False,
                             help_text=_('address:port, e.g. '
                                         '192.0.2.10:3260'))
    transport = forms.ThemableChoiceField(label=_('Transport'),
                                          choices=TRANSPORT_CHOICES)
    enabled = forms.BooleanField(label=_('Enabled'), required=False,
                                 initial=True)

    def request_fields(self, data):
        fields = super().request_fields(data)
        # An unticked box is a change too: the node is disabled.
        fields['enabled'] = bool(data.get('enabled'))
        return fields


class CreateMemoryNodeForm(UpdateMemoryNodeForm):
    name = forms.CharField(label=_('Name'), max_length=255)
    pool = forms.CharField(label=_('Pool'), max_length=255,
                           help_text=_('Memory pool name or UUID.'))
    exporter = forms.CharField(label=_('Exporter'), max_length=64,
                               initial='tgt',
                               help_text=_('tgt or lio.'))
    field_order = ['name', 'pool', 'capacity_mb', 'reserved_mb', 'exporter',
                   'portal', 'transport', 'enabled']


class IndexView(base.IndexView):
    table_class = MemoryNodesTable
    page_title = _('Memory Nodes')


class CreateView(base.CreateView):
    form_class = CreateMemoryNodeForm
    panel_slug = SLUG
    page_title = _('Create Memory Node')


class UpdateView(base.UpdateView):
    form_class = UpdateMemoryNodeForm
    panel_slug = SLUG
    page_title = _('Edit Memory Node')
