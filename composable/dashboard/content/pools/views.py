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
from horizon import exceptions
from horizon import tables

from composable.dashboard.api import composable as api
from composable.dashboard.content.pools import tables as pool_tables


class IndexView(tables.DataTableView):
    table_class = pool_tables.PoolsTable
    template_name = 'project/composable_pools/index.html'
    page_title = _('Pools')

    def get_data(self):
        try:
            return api.pool_list(self.request)
        except api.ComposableAPIError:
            exceptions.handle(self.request,
                              _('Unable to retrieve the pools.'))
            return []
