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

"""Tests of the Heat resource, run in an environment with openstack-heat
(``tox -e heat``).

Heat's test harness runs oslo.service on its threading backend, and the
backend is chosen once per process, by the first module that asks: choose
it here, before any test module imports Heat's engine.
"""

from oslo_service import backend

backend.init_backend(backend.BackendType.THREADING)
