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

from composable.policies import base

# Nova's scheduler filter (the service role) reads which free devices
# each host can reach.
rules = base.crud_rules('device', 'devices', 'devices', base.RULE_ADMIN,
                        'device',
                        overrides={'get': base.ADMIN_OR_SERVICE,
                                   'list': base.ADMIN_OR_SERVICE})


def list_rules():
    return rules
