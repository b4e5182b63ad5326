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

from composable.common import sriov as sriov_words
from composable.dashboard.content.admin import base
from composable.dashboard.content.pools import tables as pool_tables
from composable.dashboard import utils

SLUG = 'composable_admin_pools'

KIND_CHOICES = (('memory', _('Memory')), ('gpu', _('GPU')),
                ('pci', _('PCI device')))
# Empty: the API's default (network), and no field a client older than
# API 1.5 would be refused for.
MEDIUM_CHOICES = (('', _('Network (default)')),
                  ('network', _('Network: memory nodes over iSCSI')),
                  ('cxl', _('CXL: memory devices onlined as a NUMA node')))
VF_MODE_CHOICES = (
    ('', _('On demand (default)')),
    (sriov_words.ON_DEMAND, _('On demand: made when a lease is bound')),
    (sriov_words.PRECREATED,
     _("Precreated: made by the host's [compute_node]sriov_numvfs")),
)
# The form's SR-IOV fields and the API's names for them (the pool's
# ``sriov`` object, API 1.3).
SRIOV_FIELDS = (('sriov_host', 'host'), ('sriov_pf_address', 'pf_address'),
                ('sriov_vf_count', 'vf_count'), ('sriov_vf_mode', 'vf_mode'),
                ('sriov_vendor_id', 'vendor_id'),
                ('sriov_product_id', 'product_id'))
SRIOV_REQUIRED = ('sriov_host', 'sriov_pf_address', 'sriov_vf_count')


def sriov_text(pool):
    """Host, physical function and virtual functions of an SR-IOV pool;
    '-' for other pools."""
    info = pool.get('sriov')
    if not info:
        return '-'
    return _('%(host)s %(pf)s: %(count)s VFs, %(mode)s') % {
        'host': info.get('host'), 'pf': info.get('pf_address'),
        'count': info.get('vf_count'), 'mode': info.get('vf_mode')}


class CreatePool(base.CreateAction):
    verbose_name = _('Create Pool')


class PoolsTable(base.InventoryTable):
    api_name = 'pool'
    panel_slug = SLUG
    named = {'fabric_uuid': 'fabric'}
    name = tables.Column('name', verbose_name=_('Name'))
    kind = tables.Column('kind', verbose_name=_('Kind'))
    resource_class = tables.Column('resource_class',
                                   verbose_name=_('Resource class'))
    fabric = tables.Column('fabric_name', verbose_name=_('Fabric'))
    sriov = tables.WrappingColumn(sriov_text, verbose_name=_('SR-IOV'))
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
    # A PCI pool of the SR-IOV virtual functions of one physical function
    # of one host (API 1.3): each virtual function is a device of the
    # pool, lent to one lease at a time.
    sriov_host = forms.ThemableChoiceField(
        label=_('SR-IOV: host'), required=False,
        help_text=_('PCI pools of SR-IOV virtual functions only: the host '
                    'of the physical function. Leave empty for other '
                    'pools.'))
    sriov_pf_address = forms.RegexField(
        label=_('SR-IOV: physical function'), required=False,
        max_length=16,
        regex=r'^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$',
        error_messages={'invalid': _('Enter a PCI address such as '
                                     '0000:41:00.0.')},
        help_text=_('Its PCI address on that host, e.g. 0000:41:00.0.'))
    sriov_vf_count = forms.IntegerField(
        label=_('SR-IOV: virtual functions'), required=False, min_value=1,
        max_value=sriov_words.MAX_VFS,
        help_text=_('How many: one device of the pool each.'))
    sriov_vf_mode = forms.ThemableChoiceField(
        label=_('SR-IOV: made'), required=False, choices=VF_MODE_CHOICES)
    sriov_vendor_id = forms.RegexField(
        label=_('SR-IOV: vendor ID'), regex=r'^(0x)?[0-9a-fA-F]{4}$',
        required=False,
        help_text=_('PCI vendor ID of the virtual functions, checked on '
                    'the host (optional).'))
    sriov_product_id = forms.RegexField(
        label=_('SR-IOV: product ID'), regex=r'^(0x)?[0-9a-fA-F]{4}$',
        required=False,
        help_text=_('PCI device ID of the virtual functions (optional).'))
    field_order = ['name', 'kind', 'fabric', 'device_class', 'traits',
                   'reserved', 'step_size', 'medium', 'description'] + [
                       name for name, _api_name in SRIOV_FIELDS]

    def __init__(self, request, *args, **kwargs):
        super().__init__(request, *args, **kwargs)
        self.fields['sriov_host'].choices = utils.host_choices(
            request, _('None: not an SR-IOV pool'))

    def clean(self):
        data = super().clean()
        given = [name for name, _api_name in SRIOV_FIELDS
                 if data.get(name) not in (None, '')]
        missing = [str(self.fields[name].label) for name in SRIOV_REQUIRED
                   if data.get(name) in (None, '')]
        if given and missing:
            raise forms.ValidationError(
                _('A pool of SR-IOV virtual functions needs %s too.')
                % ', '.join(missing))
        return data

    def request_fields(self, data):
        fields = super().request_fields(data)
        sriov = {}
        for name, api_name in SRIOV_FIELDS:
            value = fields.pop(name, None)
            if value is not None:
                sriov[api_name] = value
        if sriov:
            fields['sriov'] = sriov
        return fields


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
