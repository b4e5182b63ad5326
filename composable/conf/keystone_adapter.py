# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""keystoneauth adapter options shared by the groups of the services
composable calls ([placement], [nova])."""

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

# Left out: the clients pick a microversion per call, and Nova registers
# placeholders under these names in its own [placement] group (tests and
# all-in-one deployments load both).
_VERSION_OPTS = ('version', 'min_version', 'max_version')


def adapter_opts(service_type):
    """The adapter options (endpoint, interface, region ...) for
    ``service_type``, without the version options."""
    adapter = [opt for opt in ks_loading.get_adapter_conf_options(
        include_deprecated=False) if opt.dest not in _VERSION_OPTS]
    cfg.set_defaults(adapter, valid_interfaces=['internal', 'public'],
                     service_type=service_type)
    return adapter
