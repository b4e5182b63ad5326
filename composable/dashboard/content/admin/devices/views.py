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
from horizon import forms
from horizon import tables

from composable.common import states
from composable.dashboard.content.admin import base

SLUG = 'composable_admin_devices'

# Device states: True is well, False is a failure, None needs a look.
STATE_CHOICES = (
    (states.DEVICE_AVAILABLE, True),
    (states.DEVICE_RESERVED, True),
    (states.DEVICE_ATTACHED, True),
    (states.DEVICE_MAINTENANCE, None),
    (states.DEVICE_FAULTY, False),
)
STATE_DISPLAY_CHOICES = (
    (states.DEVICE_AVAILABLE, _('Available')),
    (states.DEVICE_RESERVED, _('Reserved')),
    (states.DEVICE_ATTACHED, _('Attached')),
    (states.DEVICE_MAINTENANCE, _('Maintenance')),
    (states.DEVICE_FAULTY, _('Faulty')),
)
# What an operator may set; the others follow the leases.
SETTABLE_STATES = (states.DEVICE_AVAILABLE, states.DEVICE_MAINTENANCE,
                   states.DEVICE_FAULTY)

# What the fabric reports of a device's health (API 1.4: ``health``,
# ``health_reason``): ok, warning, critical or unknown.
HEALTH_DISPLAY = {
    'ok': _('OK'),
    'warning': _('Warning'),
    'critical': _('Critical'),
    'unknown': _('Unknown'),
}


def health_text(device):
    """The fabric's word on the device, with its reason when not ok;
    '-' where the API does not report health (before 1.4)."""
    value = device.get('health')
    if not value:
        return '-'
    text = HEALTH_DISPLAY.get(value, value)
    reason = device.get('health_reason')
    return '%s: %s' % (text, reason) if reason else text


def reachable_text(device):
    """The hosts the fabric can connect the device to (API 1.4): None
    there means every host of the fabric, an empty list none."""
    if 'reachable_hosts' not in device._apidict:
        return '-'
    hosts = device.get('reachable_hosts')
    if hosts is None:
        return _('Every host of the fabric')
    if not hosts:
        return _('None')
    return ', '.join(hosts)


def lease_link(device):
    """The page of the lease holding the device (None: held by none)."""
    if not device.get('lease_uuid'):
        return None
    return reverse('horizon:project:composable_leases:detail',
                   args=[device.lease_uuid])


class CreateDevice(base.CreateAction):
    verbose_name = _('Create Device')


class DevicesTable(base.InventoryTable):
    api_name = 'device'
    panel_slug = SLUG
    named = {'pool_uuid': 'pool', 'lease_uuid': 'lease'}
    name = tables.Column(lambda d: d.name or d.address,
                         verbose_name=_('Name'))
    kind = tables.Column('kind', verbose_name=_('Kind'))
    model = tables.Column('model', verbose_name=_('Model'), empty_value='-')
    serial = tables.Column(lambda d: d.get('serial') or '-',
                           verbose_name=_('Serial number'))
    pool = tables.Column('pool_name', verbose_name=_('Pool'))
    state = tables.Column('state', verbose_name=_('State'), status=True,
                          status_choices=STATE_CHOICES,
                          display_choices=STATE_DISPLAY_CHOICES)
    health = tables.WrappingColumn(health_text, verbose_name=_('Health'))
    reachable_hosts = tables.WrappingColumn(
        reachable_text, verbose_name=_('Reachable hosts'))
    lease = tables.Column('lease_name', verbose_name=_('Held by lease'),
                          link=lease_link, empty_value='-')
    pci_address = tables.Column('pci_address',
                                verbose_name=_('PCI address'),
                                empty_value='-')

    class Meta(object):
        name = 'devices'
        verbose_name = _('Devices')
        table_actions = (CreateDevice, base.DeleteAction)
        row_actions = (base.UpdateAction, base.DeleteAction)


class UpdateDeviceForm(base.InventoryForm):
    api_name = 'device'
    noun = _('device')
    name = forms.CharField(label=_('Name'), max_length=255, required=False)
    model = forms.CharField(label=_('Model'), max_length=255,
                            required=False)
    traits = forms.CharField(label=_('Traits'), required=False,
                             help_text=_('Comma-separated.'))
    state = forms.ThemableChoiceField(
        label=_('State'),
        choices=[(s, dict(STATE_DISPLAY_CHOICES)[s])
                 for s in SETTABLE_STATES],
        help_text=_('Maintenance or faulty takes the device out of the '
                    'pool; available puts it back.'))


class CreateDeviceForm(base.InventoryForm):
    api_name = 'device'
    noun = _('device')
    pool = forms.CharField(label=_('Pool'), max_length=255,
                           help_text=_('Pool name or UUID.'))
    address = forms.CharField(
        label=_('Fabric address'), max_length=255,
        help_text=_('The fabric-native ID: a Redfish resource block URI, '
                    'a Switchtec PDFID, ...'))
    kind = forms.RegexField(label=_('Kind'), regex=r'^[a-z0-9_]+$',
                            max_length=16, initial='gpu')
    name = forms.CharField(label=_('Name'), max_length=255, required=False)
    vendor_id = forms.RegexField(label=_('PCI vendor ID'),
                                 regex=r'^[0-9a-fA-F]{4}$', required=False)
    product_id = forms.RegexField(label=_('PCI product ID'),
                                  regex=r'^[0-9a-fA-F]{4}$', required=False)
    model = forms.CharField(label=_('Model'), max_length=255,
                            required=False)
    traits = forms.CharField(label=_('Traits'), required=False,
                             help_text=_('Comma-separated.'))


class IndexView(base.IndexView):
    table_class = DevicesTable
    page_title = _('Devices')


class CreateView(base.CreateView):
    form_class = CreateDeviceForm
    panel_slug = SLUG
    page_title = _('Create Device')


class UpdateView(base.UpdateView):
    form_class = UpdateDeviceForm
    panel_slug = SLUG
    page_title = _('Edit Device')
