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

"""oslo.messaging plumbing: transports, the context serializer, servers.

Servers use the threading executor (no eventlet). The standalone service
uses the in-process ``fake://`` transport.
"""

import oslo_messaging as messaging
from oslo_messaging.rpc import dispatcher
from oslo_serialization import jsonutils

from composable.common import context as composable_context
from composable.common import exception
from composable import conf

CONF = conf.CONF

ALLOWED_EXMODS = [exception.__name__]

CONDUCTOR_TOPIC = 'composable-conductor'
AGENT_TOPIC = 'composable-agent'

_TRANSPORT = None


def init(conf_=None):
    global _TRANSPORT
    conf_ = conf_ or CONF
    _TRANSPORT = messaging.get_rpc_transport(
        conf_, allowed_remote_exmods=ALLOWED_EXMODS)
    return _TRANSPORT


def cleanup():
    global _TRANSPORT
    if _TRANSPORT is not None:
        _TRANSPORT.cleanup()
    _TRANSPORT = None


def get_transport():
    if _TRANSPORT is None:
        init()
    return _TRANSPORT


class JsonPayloadSerializer(messaging.NoOpSerializer):
    @staticmethod
    def serialize_entity(context, entity):
        return jsonutils.to_primitive(entity, convert_instances=True)


class RequestContextSerializer(messaging.Serializer):
    def __init__(self, base=None):
        self._base = base or JsonPayloadSerializer()

    def serialize_entity(self, context, entity):
        return self._base.serialize_entity(context, entity)

    def deserialize_entity(self, context, entity):
        return self._base.deserialize_entity(context, entity)

    def serialize_context(self, context):
        return context.to_dict()

    def deserialize_context(self, context):
        return composable_context.RequestContext.from_dict(context)


def call_unwrapped(fn, *args, **kwargs):
    """Call an RPC server's method in-process (a ConductorManager method
    from inside the conductor): the refusals it declares come wrapped for
    the RPC server (ExpectedException); raise the exception itself."""
    try:
        return fn(*args, **kwargs)
    except dispatcher.ExpectedException as wrapped:
        raise wrapped.exc_info[1]


def get_client(topic, version, server=None, timeout=None,
               version_cap=None):
    target = messaging.Target(topic=topic, version=version, server=server)
    return messaging.get_rpc_client(get_transport(), target,
                                    serializer=RequestContextSerializer(),
                                    timeout=timeout,
                                    version_cap=version_cap)


def get_server(topic, server, endpoints):
    target = messaging.Target(topic=topic, server=server)
    access_policy = dispatcher.DefaultRPCAccessPolicy
    return messaging.get_rpc_server(get_transport(), target, endpoints,
                                    executor='threading',
                                    serializer=RequestContextSerializer(),
                                    access_policy=access_policy)
