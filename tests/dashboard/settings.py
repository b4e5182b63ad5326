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

"""Django settings of the dashboard tests: Horizon's own test settings
with the composable panels enabled as a deployment enables them."""

from horizon.test.settings import *  # noqa: F403,H303
from openstack_dashboard.test.settings import *  # noqa: F403,H303
import openstack_dashboard.enabled
from openstack_dashboard.utils import settings as dashboard_settings

import composable.dashboard.enabled

HORIZON_CONFIG.pop('dashboards', None)  # noqa: F405
HORIZON_CONFIG.pop('default_dashboard', None)  # noqa: F405

dashboard_settings.update_dashboards(
    [composable.dashboard.enabled, openstack_dashboard.enabled],
    HORIZON_CONFIG,  # noqa: F405
    INSTALLED_APPS,  # noqa: F405
)
# Horizon's test settings enabled its own dashboards already; they are
# listed twice now. (The plugin's files add its application once: see
# test_enabled.py.)
INSTALLED_APPS = list(dict.fromkeys(INSTALLED_APPS))  # noqa: F405
