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
from django.urls import reverse_lazy
from django.utils.translation import gettext_lazy as _
from horizon import exceptions
from horizon import forms
from horizon import tables
from horizon import tabs
from horizon.utils import memoized

from composable.dashboard.api import composable as api
from composable.dashboard.content.leases import forms as lease_forms
from composable.dashboard.content.leases import tables as lease_tables
from composable.dashboard.content.leases import tabs as lease_tabs

INDEX_URL = reverse_lazy('horizon:project:composable_leases:index')


class IndexView(tables.DataTableView):
    table_class = lease_tables.LeasesTable
    template_name = 'project/composable_leases/index.html'
    page_title = _('Leases')

    def get_data(self):
        filters = self.get_filters()
        try:
            leases = api.lease_list(self.request, **filters)
        except api.ComposableAPIError:
            exceptions.handle(self.request,
                              _('Unable to retrieve the leases.'))
            return []
        pool_names = lease_tables.load_pool_names(self.request)
        for lease in leases:
            lease_tables.add_pool_names(lease, pool_names)
        lease_tables.add_server_names(self.request, leases)
        return leases


class DetailView(tabs.TabView):
    tab_group_class = lease_tabs.LeaseDetailTabs
    template_name = 'horizon/common/_detail.html'
    page_title = '{{ lease.display_name }}'

    @memoized.memoized_method
    def get_data(self):
        try:
            return api.lease_get(self.request, self.kwargs['lease_id'])
        except api.ComposableAPIError:
            exceptions.handle(self.request,
                              _('Unable to retrieve the lease.'),
                              redirect=INDEX_URL)

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        lease = self.get_data()
        table = lease_tables.LeasesTable(self.request)
        context['lease'] = lease
        context['url'] = INDEX_URL
        context['actions'] = table.render_row_actions(lease)
        return context

    def get_tabs(self, request, *args, **kwargs):
        return self.tab_group_class(request, lease=self.get_data(),
                                    **kwargs)


class CreateView(forms.ModalFormView):
    form_class = lease_forms.CreateLeaseForm
    form_id = 'create_lease_form'
    modal_id = 'create_lease_modal'
    template_name = 'project/composable_leases/create.html'
    submit_label = _('Create Lease')
    submit_url = reverse_lazy('horizon:project:composable_leases:create')
    success_url = INDEX_URL
    page_title = _('Create Lease')


class _LeaseFormView(forms.ModalFormView):
    """A form about one lease: its ID is in the URL and the form."""

    success_url = INDEX_URL

    def get_initial(self):
        return {'lease_id': self.kwargs['lease_id']}

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context['submit_url'] = reverse(self.submit_url_name,
                                        args=[self.kwargs['lease_id']])
        return context


class BindView(_LeaseFormView):
    form_class = lease_forms.BindLeaseForm
    form_id = 'bind_lease_form'
    modal_id = 'bind_lease_modal'
    template_name = 'project/composable_leases/bind.html'
    submit_label = _('Bind')
    submit_url_name = 'horizon:project:composable_leases:bind'
    page_title = _('Bind Lease to a Server')


class BindHostView(_LeaseFormView):
    form_class = lease_forms.BindHostLeaseForm
    form_id = 'bind_host_lease_form'
    modal_id = 'bind_host_lease_modal'
    template_name = 'project/composable_leases/bind_host.html'
    submit_label = _('Bind')
    submit_url_name = 'horizon:project:composable_leases:bind_host'
    page_title = _('Bind Lease to a Host')

    def dispatch(self, request, *args, **kwargs):
        # The form lists the inventory's hosts, which only administrators
        # may read: others get Horizon's "not authorized".
        if not lease_tables.is_admin(request):
            raise exceptions.NotAuthorized
        return super().dispatch(request, *args, **kwargs)


class ExtendView(_LeaseFormView):
    form_class = lease_forms.ExtendLeaseForm
    form_id = 'extend_lease_form'
    modal_id = 'extend_lease_modal'
    template_name = 'project/composable_leases/extend.html'
    submit_label = _('Extend')
    submit_url_name = 'horizon:project:composable_leases:extend'
    page_title = _('Extend Lease')
