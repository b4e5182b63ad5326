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

from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from horizon import exceptions
from horizon import forms
from horizon import messages
from openstack_dashboard.api import base
from openstack_dashboard.api import nova
from osc_lib import exceptions as osc_exceptions

from composable.cli import utils as cli_utils
from composable.common import states
from composable.dashboard.api import composable as api
from composable.dashboard import utils

ATTACH_MODE_CHOICES = (
    (states.ATTACH_HOST, _('Host: the compute node uses it (swap, PCI)')),
    (states.ATTACH_GUEST, _('Guest: the server bound to the lease gets it')),
    (states.ATTACH_VIRTIO_MEM,
     _('virtio-mem: the CXL memory goes into the server bound to the '
       'lease')),
)


def parse_memory(value):
    """MiB from a size with units (512MiB, 4GiB, 1.5TiB; bare = MiB)."""
    try:
        return cli_utils.parse_size(value)
    except osc_exceptions.CommandError:
        raise forms.ValidationError(
            _('Enter a size such as 512MiB, 4GiB or 1.5TiB (a number '
              'alone is MiB), a whole number of MiB above zero.'))


def iso_utc(value):
    """An aware datetime as the ISO 8601 UTC string the API takes."""
    return value.astimezone(datetime.timezone.utc).strftime(
        '%Y-%m-%dT%H:%M:%SZ')


class CreateLeaseForm(forms.SelfHandlingForm):
    name = forms.CharField(label=_('Name'), max_length=255)
    description = forms.CharField(label=_('Description'), max_length=255,
                                  required=False)
    memory = forms.CharField(
        label=_('Memory'), required=False, max_length=32,
        help_text=_('Memory to lease, e.g. 512MiB, 4GiB or 1.5TiB '
                    '(binary units; a number alone is MiB).'))
    device_count = forms.IntegerField(
        label=_('Number of devices'), required=False, min_value=1,
        max_value=4096)
    device_kind = forms.CharField(
        label=_('Device kind'), required=False, max_length=16,
        help_text=_('gpu, or a PCI device class in lower case, e.g. nvme; '
                    'empty: the kind of the pool chosen, else gpu.'))
    device_model = forms.CharField(
        label=_('GPU or device model'), required=False, max_length=255,
        help_text=_('e.g. A100; empty: any model.'))
    pool = forms.ThemableChoiceField(
        label=_('Pool'), required=False,
        help_text=_('Pool to take from; any pool of the right kind '
                    'if none is chosen.'))
    attach_mode = forms.ThemableChoiceField(
        label=_('Attach mode'), choices=ATTACH_MODE_CHOICES,
        initial=states.ATTACH_HOST)
    start_at = forms.DateTimeField(
        label=_('Start'), required=False,
        widget=forms.DateTimeInput(attrs={'type': 'datetime-local'}),
        help_text=_('Empty: now. Times are in your time zone.'))
    end_at = forms.DateTimeField(
        label=_('End'), required=False,
        widget=forms.DateTimeInput(attrs={'type': 'datetime-local'}))
    # An elastic memory lease (API 1.2): composable resizes it with its
    # use, between the two limits; the memory above is where it starts.
    elastic_min = forms.CharField(
        label=_('Elastic: smallest size'), required=False, max_length=32,
        help_text=_('Makes the memory lease elastic: composable grows and '
                    'shrinks it with its use, between this size and the '
                    'largest (e.g. 1GiB and 8GiB). Leave both empty for a '
                    'lease of fixed size.'))
    elastic_max = forms.CharField(
        label=_('Elastic: largest size'), required=False, max_length=32)
    observation_window = forms.IntegerField(
        label=_('Elastic: observation window (s)'), required=False,
        min_value=10, max_value=86400, initial=300,
        help_text=_('Seconds of usage the prediction is fitted to.'))
    prediction_window = forms.IntegerField(
        label=_('Elastic: prediction window (s)'), required=False,
        min_value=10, max_value=86400, initial=60,
        help_text=_('Seconds ahead whose peak is provisioned for.'))
    headroom = forms.FloatField(
        label=_('Elastic: headroom'), required=False, min_value=0,
        max_value=10,
        help_text=_('Fraction of the predicted peak added on top; empty: '
                    '0.2.'))

    def __init__(self, request, *args, **kwargs):
        super().__init__(request, *args, **kwargs)
        choices = [('', _('Any pool'))]
        try:
            choices += [(pool.name, '%s (%s)' % (pool.name, pool.kind))
                        for pool in api.pool_list(request)]
        except api.ComposableAPIError:
            exceptions.handle(request, _('Unable to retrieve the pools.'))
        self.fields['pool'].choices = choices

    def clean_memory(self):
        value = (self.cleaned_data.get('memory') or '').strip()
        return parse_memory(value) if value else None

    def clean_elastic_min(self):
        value = (self.cleaned_data.get('elastic_min') or '').strip()
        return parse_memory(value) if value else None

    def clean_elastic_max(self):
        value = (self.cleaned_data.get('elastic_max') or '').strip()
        return parse_memory(value) if value else None

    def clean(self):
        data = super().clean()
        if not (data.get('memory') or data.get('device_count')):
            raise forms.ValidationError(
                _('Nothing to lease: give a memory size, a number of '
                  'devices, or both.'))
        start, end = data.get('start_at'), data.get('end_at')
        if end and end <= (start or timezone.now()):
            raise forms.ValidationError(
                _('The end must be after the start (and in the future).'))
        low, high = data.get('elastic_min'), data.get('elastic_max')
        if (low or high) and not (low and high):
            raise forms.ValidationError(
                _('An elastic lease needs both its smallest and its '
                  'largest size.'))
        if low and not data.get('memory'):
            raise forms.ValidationError(
                _('An elastic lease leases memory: give the memory size it '
                  'starts at.'))
        return data

    @staticmethod
    def elastic(data):
        """The elastic policy the form asks for, or None."""
        if not data.get('elastic_min'):
            return None
        policy = {'min_mb': data['elastic_min'],
                  'max_mb': data['elastic_max'],
                  'observation_window': data.get('observation_window') or
                  300,
                  'prediction_window': data.get('prediction_window') or 60}
        if data.get('headroom') is not None:
            policy['headroom'] = data['headroom']
        return policy

    def handle(self, request, data):
        fields = {'name': data['name'],
                  'attach_mode': data['attach_mode']}
        if data.get('description'):
            fields['description'] = data['description']
        if data.get('memory'):
            fields['memory_mb'] = data['memory']
        elastic = self.elastic(data)
        if elastic:
            fields['elastic'] = elastic
        if data.get('device_count'):
            fields['device_count'] = data['device_count']
            # Left empty, the API takes the pool's kind (gpu without one).
            if data.get('device_kind'):
                fields['device_kind'] = data['device_kind']
            if data.get('device_model'):
                fields['device_model'] = data['device_model']
        if data.get('pool'):
            fields['pools'] = [data['pool']]
        if data.get('start_at'):
            fields['start_at'] = iso_utc(data['start_at'])
        if data.get('end_at'):
            fields['end_at'] = iso_utc(data['end_at'])
        try:
            lease = api.lease_create(request, **fields)
        except api.ComposableAPIError:
            exceptions.handle(request, _('Unable to create lease "%s".')
                              % data['name'])
            return False
        messages.success(request, _('Lease "%s" was created.')
                         % data['name'])
        return lease


def server_choices(request, first):
    """The project's servers as choices, after ``first``."""
    choices = [('', first)]
    try:
        # The project's own servers: Nova lists no other project's.
        servers, _more = nova.server_list(request)
        choices += [(s.id, '%s (%s)' % (s.name, s.id))
                    for s in sorted(servers, key=lambda s: s.name)]
    except Exception:
        exceptions.handle(request, _('Unable to retrieve the servers.'))
    return choices


class _BindForm(forms.SelfHandlingForm):
    """What binding a lease asks: the API's bind, with a server, a host
    or both (a host alone: its compute node uses the lease; a server: on
    the host Nova says it runs on, or on the host given)."""

    lease_id = forms.CharField(widget=forms.HiddenInput())

    def handle(self, request, data):
        try:
            api.lease_bind(request, data['lease_id'],
                           server=data.get('server') or None,
                           host=data.get('host') or None,
                           attach_mode=data.get('attach_mode') or None)
        except api.ComposableAPIError:
            exceptions.handle(request, _('Unable to bind the lease.'))
            return False
        messages.success(request, _('Binding of the lease requested.'))
        return True


class BindLeaseForm(_BindForm):
    server = forms.ThemableChoiceField(label=_('Server'))
    attach_mode = forms.ThemableChoiceField(
        label=_('Attach mode'), required=False,
        choices=(('', _("The lease's attach mode")),) + ATTACH_MODE_CHOICES)

    def __init__(self, request, *args, **kwargs):
        super().__init__(request, *args, **kwargs)
        self.fields['server'].choices = server_choices(
            request, _('Select a server'))


class BindHostLeaseForm(_BindForm):
    """An administrator's bind to a compute host: the hosts are listed
    by the inventory API, which only administrators may read."""

    host = forms.ThemableChoiceField(
        label=_('Host'),
        help_text=_("A compute host on the fabric of the lease's pools."))
    attach_mode = forms.ThemableChoiceField(
        label=_('Attach mode'), choices=ATTACH_MODE_CHOICES,
        initial=states.ATTACH_HOST)
    server = forms.ThemableChoiceField(
        label=_('Server (guest mode)'), required=False,
        help_text=_('Guest mode only: a server of the project running on '
                    'that host, which gets what the lease holds.'))

    def __init__(self, request, *args, **kwargs):
        super().__init__(request, *args, **kwargs)
        self.fields['host'].choices = utils.host_choices(
            request, _('Select a host'))
        if base.is_service_enabled(request, 'compute'):
            self.fields['server'].choices = server_choices(request,
                                                           _('None'))
        else:
            # No Nova in this cloud: host mode is all there is.
            del self.fields['server']


class ExtendLeaseForm(forms.SelfHandlingForm):
    lease_id = forms.CharField(widget=forms.HiddenInput())
    end_at = forms.DateTimeField(
        label=_('New end'),
        widget=forms.DateTimeInput(attrs={'type': 'datetime-local'}),
        help_text=_('In your time zone.'))

    def clean_end_at(self):
        end = self.cleaned_data['end_at']
        if end <= timezone.now():
            raise forms.ValidationError(_('The new end must be in the '
                                          'future.'))
        return end

    def handle(self, request, data):
        try:
            api.lease_update(request, data['lease_id'],
                             end_at=iso_utc(data['end_at']))
        except api.ComposableAPIError:
            exceptions.handle(request, _('Unable to extend the lease.'))
            return False
        messages.success(request, _('The lease now ends at %s.')
                         % iso_utc(data['end_at']))
        return True
