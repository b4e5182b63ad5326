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

from django.urls import re_path

from composable.dashboard.content.leases import views

LEASE = r'^(?P<lease_id>[^/]+)/%s$'

urlpatterns = [
    re_path(r'^$', views.IndexView.as_view(), name='index'),
    re_path(r'^create/$', views.CreateView.as_view(), name='create'),
    re_path(LEASE % '', views.DetailView.as_view(), name='detail'),
    re_path(LEASE % 'bind', views.BindView.as_view(), name='bind'),
    re_path(LEASE % 'bind_host', views.BindHostView.as_view(),
            name='bind_host'),
    re_path(LEASE % 'extend', views.ExtendView.as_view(), name='extend'),
]
