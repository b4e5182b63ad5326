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

"""keystoneauth helpers shared by composable's clients of other services
(Placement, Nova) and by the Nova-side scheduler filter: no composable
configuration is imported here."""


def adapter_options(group):
    """keystoneauth Adapter arguments from a configuration ``group`` that
    has the adapter options (without the version options and without the
    interface, which each caller passes as its client wants it)."""
    return dict(service_type=group.service_type,
                service_name=group.service_name,
                region_name=group.region_name,
                endpoint_override=group.endpoint_override,
                connect_retries=group.connect_retries,
                connect_retry_delay=group.connect_retry_delay,
                status_code_retries=group.status_code_retries,
                status_code_retry_delay=group.status_code_retry_delay)
