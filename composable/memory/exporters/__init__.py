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

"""Memory exporters, loaded by name from the composable.memory.exporters
entry point (``[agent]memory_exporter``)."""

from oslo_log import log as logging
from stevedore import driver as stevedore_driver

from composable.common import exception

LOG = logging.getLogger(__name__)

NAMESPACE = 'composable.memory.exporters'


def get_exporter(name, node_name):
    try:
        manager = stevedore_driver.DriverManager(
            NAMESPACE, name, invoke_on_load=True,
            invoke_args=(node_name,))
    except Exception as exc:
        LOG.error('Cannot load memory exporter %(name)s: %(exc)s',
                  {'name': name, 'exc': exc})
        raise exception.DriverError(
            reason='memory exporter %s could not be loaded; check '
                   '[agent]memory_exporter' % name)
    return manager.driver
