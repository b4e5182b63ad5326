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

"""What the Admin -> Composable panels share.

Each inventory panel (fabrics, hosts, memory nodes, pools, devices) lists
one collection of the API and, where the API allows, creates, edits and
deletes its objects. A panel names its collection (``fabric``,
``memory_node``, ...) and the calls of ``composable.dashboard.api`` are
found by that name: ``<name>_list``, ``<name>_create``, ``<name>_update``,
``<name>_delete``.
"""

from django.urls import re_path
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext_lazy
import horizon
from horizon import exceptions
from horizon import forms
from horizon import messages
from horizon import tables

from composable.dashboard.api import composable as api
from composable.dashboard import utils


def call(name, verb):
    return getattr(api, '%s_%s' % (name, verb))


def url_name(slug, view):
    return 'horizon:admin:%s:%s' % (slug, view)


class InventoryPanel(horizon.Panel):
    # The Admin dashboard's own check is made of the policy rules of
    # other services (Keystone, Nova, Glance, ...), which Horizon lets
    # pass when it has no policy file for them: a project member could
    # open these panels by URL and saw the API's refusal as an error.
    # The panels ask for the admin role themselves; the API's policy
    # keeps the inventory admin-only in any case.
    permissions = ('openstack.services.composable', 'openstack.roles.admin')


def traits_list(value):
    """'A, B' -> ['A', 'B'] (upper case, no empties)."""
    return [t.strip().upper() for t in (value or '').split(',') if t.strip()]


class CreateAction(tables.LinkAction):
    name = 'create'
    classes = ('ajax-modal',)
    icon = 'plus'

    def get_link_url(self, datum=None):
        return reverse(url_name(self.table.panel_slug, 'create'))


class UpdateAction(tables.LinkAction):
    name = 'update'
    verbose_name = _('Edit')
    classes = ('ajax-modal',)
    icon = 'pencil'

    def get_link_url(self, datum=None):
        return reverse(url_name(self.table.panel_slug, 'update'),
                       args=[datum.uuid])


class DeleteAction(tables.DeleteAction):

    @staticmethod
    def action_present(count):
        return ngettext_lazy('Delete', 'Delete', count)

    @staticmethod
    def action_past(count):
        return ngettext_lazy('Deleted', 'Deleted', count)

    def delete(self, request, obj_id):
        utils.call_reporting_failure(
            self.table, request, obj_id, call(self.table.api_name, 'delete'),
            _('Unable to delete %(name)s: %(reason)s'))


class InventoryTable(tables.DataTable):
    """A table of one collection; subclasses set api_name, panel_slug.

    ``named``: the fields holding the UUID of a fabric or pool, and the
    collection it belongs to (``{'fabric_uuid': 'fabric'}``): the index
    view gives each row a ``fabric_name`` (``pool_name``) to show
    instead, the UUID itself when the name cannot be had (see
    add_names).
    """

    api_name = None
    panel_slug = None
    named = {}

    def get_object_id(self, datum):
        return datum.uuid

    def get_object_display(self, datum):
        return getattr(datum, 'name', None) or datum.uuid


class InventoryForm(forms.SelfHandlingForm):
    """Create (no ``uuid``) or update (``uuid`` given) one object.

    Empty optional fields are left out of the request, so the API's
    defaults apply on create and nothing changes on update.
    """

    api_name = None
    noun = None
    uuid = forms.CharField(widget=forms.HiddenInput(), required=False)

    def request_fields(self, data):
        fields = {}
        for key, value in data.items():
            if key == 'uuid' or value in (None, ''):
                continue
            if key == 'traits':
                value = traits_list(value)
            fields[key] = value
        return fields

    def handle(self, request, data):
        fields = self.request_fields(data)
        ident = data.get('uuid')
        try:
            if ident:
                obj = call(self.api_name, 'update')(request, ident, **fields)
            else:
                obj = call(self.api_name, 'create')(request, **fields)
        except api.ComposableAPIError:
            exceptions.handle(
                request, (_('Unable to update the %s.') if ident
                          else _('Unable to create the %s.')) % self.noun)
            return False
        messages.success(request, (_('The %(noun)s %(name)s was updated.')
                                   if ident else
                                   _('The %(noun)s %(name)s was created.'))
                         % {'noun': self.noun,
                            'name': getattr(obj, 'name', None) or obj.uuid})
        return obj


class IndexView(tables.DataTableView):
    template_name = 'composable_dashboard/index.html'

    def get_data(self):
        try:
            items = call(self.table_class.api_name, 'list')(self.request)
        except api.ComposableAPIError:
            exceptions.handle(self.request,
                              _('Unable to retrieve the list.'))
            return []
        add_names(self.request, items, self.table_class.named)
        return items


def names_of(request, collection):
    """UUID -> name of ``collection``: ``api.<collection>_names`` where
    the API module has one (``aggregate``: Nova's host aggregates,
    ``lease``: the leases of every project), else what
    ``api.<collection>_list`` lists."""
    reader = getattr(api, '%s_names' % collection, None)
    if reader is not None:
        return reader(request)
    return api.names_by_uuid(request, call(collection, 'list'))


def add_names(request, items, named):
    """Give each item a ``<collection>_name`` for each UUID field of
    ``named`` ({field: collection}): one read per collection, and none
    when no item refers to one. The UUID itself where the name cannot be
    had (None where the field is empty)."""
    for field, collection in named.items():
        uuids = {item.get(field) for item in items} - {None}
        names = names_of(request, collection) if uuids else {}
        for item in items:
            uuid = item.get(field)
            item._apidict['%s_name' % collection] = names.get(uuid) or uuid


class CreateView(forms.ModalFormView):
    template_name = 'composable_dashboard/form.html'
    submit_label = _('Create')

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context['submit_url'] = reverse(url_name(self.panel_slug, 'create'))
        return context

    def get_success_url(self):
        return reverse(url_name(self.panel_slug, 'index'))


class UpdateView(CreateView):
    submit_label = _('Save')

    def get_object(self):
        try:
            return call(self.form_class.api_name, 'get')(
                self.request, self.kwargs['uuid'])
        except api.ComposableAPIError:
            exceptions.handle(self.request,
                              _('Unable to retrieve the object.'),
                              redirect=self.get_success_url())

    def get_initial(self):
        obj = self.get_object()
        initial = {'uuid': obj.uuid}
        for name in self.form_class.base_fields:
            value = obj.get(name)
            if name == 'traits' and value is not None:
                value = ', '.join(value)
            if value is not None and name != 'uuid':
                initial[name] = value
        return initial

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context['submit_url'] = reverse(url_name(self.panel_slug, 'update'),
                                        args=[self.kwargs['uuid']])
        return context


def urlpatterns(views):
    """The index, create and update URLs of a panel's views module."""
    patterns = [re_path(r'^$', views.IndexView.as_view(), name='index')]
    if hasattr(views, 'CreateView'):
        patterns.append(re_path(r'^create/$', views.CreateView.as_view(),
                                name='create'))
    if hasattr(views, 'UpdateView'):
        patterns.append(re_path(r'^(?P<uuid>[^/]+)/update/$',
                                views.UpdateView.as_view(), name='update'))
    return patterns
