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

from composable.dashboard.api import composable as api
from composable.dashboard.content.admin import base

SLUG = 'composable_admin_fabrics'


class CreateFabric(base.CreateAction):
    verbose_name = _('Create Fabric')


class FabricsTable(base.InventoryTable):
    api_name = 'fabric'
    panel_slug = SLUG
    named = {'aggregate_uuid': 'aggregate'}
    name = tables.Column('name', verbose_name=_('Name'))
    driver = tables.Column('driver', verbose_name=_('Driver'))
    # The aggregate's name, as Nova has it; its UUID when Nova cannot be
    # read.
    aggregate = tables.Column('aggregate_name',
                              verbose_name=_('Host aggregate'),
                              empty_value='-')
    description = tables.WrappingColumn('description',
                                        verbose_name=_('Description'),
                                        empty_value='')

    class Meta(object):
        name = 'fabrics'
        verbose_name = _('Fabrics')
        table_actions = (CreateFabric, base.DeleteAction)
        row_actions = (base.UpdateAction, base.DeleteAction)


class UpdateFabricForm(base.InventoryForm):
    api_name = 'fabric'
    noun = _('fabric')
    name = forms.CharField(label=_('Name'), max_length=255)
    aggregate_uuid = forms.UUIDField(
        label=_('Host aggregate UUID'), required=False,
        help_text=_('The Nova host aggregate of the hosts on this fabric.'))
    description = forms.CharField(label=_('Description'), max_length=255,
                                  required=False)

    def __init__(self, request, *args, **kwargs):
        super().__init__(request, *args, **kwargs)
        # Nova's aggregates by name where Nova says which there are; a
        # UUID to type in where it does not.
        names = api.aggregate_names(request)
        if not names:
            return
        choices = sorted(((uuid, '%s (%s)' % (name, uuid))
                          for uuid, name in names.items()),
                         key=lambda choice: choice[1])
        current = self.initial.get('aggregate_uuid')
        if current and current not in names:
            choices.append((current, current))
        field = self.fields['aggregate_uuid']
        self.fields['aggregate_uuid'] = forms.ThemableChoiceField(
            label=_('Host aggregate'), required=False,
            choices=[('', _('None'))] + choices, help_text=field.help_text)

    def request_fields(self, data):
        fields = super().request_fields(data)
        if 'aggregate_uuid' in fields:
            fields['aggregate_uuid'] = str(fields['aggregate_uuid'])
        return fields


class CreateFabricForm(UpdateFabricForm):
    driver = forms.CharField(
        label=_('Driver'), max_length=64,
        help_text=_('redfish, switchtec or fake.'))
    # Driver settings (addresses, credentials) are given with the CLI:
    # the API never shows their secrets back, so a form could not edit
    # them faithfully.


class IndexView(base.IndexView):
    table_class = FabricsTable
    page_title = _('Fabrics')


class CreateView(base.CreateView):
    form_class = CreateFabricForm
    panel_slug = SLUG
    page_title = _('Create Fabric')


class UpdateView(base.UpdateView):
    form_class = UpdateFabricForm
    panel_slug = SLUG
    page_title = _('Edit Fabric')
