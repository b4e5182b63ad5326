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

"""The libvirt hook imports nothing of the service, so it keeps a copy of
the resource-class prefix: the copy must match the original."""

from composable.common import resource_classes
from composable.hooks import libvirt as hook


def test_resource_prefix_is_the_service_prefix():
    assert hook.RESOURCE_PREFIX == resource_classes.PREFIX
