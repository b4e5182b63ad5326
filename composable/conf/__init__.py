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
from composable.conf import conductor
from composable.conf import database
from composable.conf import default
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
fabric.register_opts(CONF)
memory.register_opts(CONF)
database.register_opts(CONF)
messaging.register_opts(CONF)
nova.register_opts(CONF)
placement.register_opts(CONF)
