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

"""Configuration options, one module per option group.

Nothing under composable/nova/ may import this package: Nova and composable
share oslo.config's global CONF, and the Nova-side plugins keep their own
``[composable]`` group in nova.conf.
"""

from oslo_config import cfg

from composable.conf import agent
from composable.conf import allocator
from composable.conf import api
from composable.conf import compute
from composable.conf import compute_cxl
from composable.conf import compute_devices
from composable.conf import compute_pci
from composable.conf import conductor
from composable.conf import database
from composable.conf import default
from composable.conf import elastic
from composable.conf import fabric
from composable.conf import memory
from composable.conf import messaging
from composable.conf import nova
from composable.conf import placement

CONF = cfg.CONF

default.register_opts(CONF)
api.register_opts(CONF)
conductor.register_opts(CONF)
allocator.register_opts(CONF)
agent.register_opts(CONF)
compute.register_opts(CONF)
compute_devices.register_opts(CONF)
compute_cxl.register_opts(CONF)
compute_pci.register_opts(CONF)
fabric.register_opts(CONF)
memory.register_opts(CONF)
database.register_opts(CONF)
messaging.register_opts(CONF)
nova.register_opts(CONF)
placement.register_opts(CONF)
elastic.register_opts(CONF)
