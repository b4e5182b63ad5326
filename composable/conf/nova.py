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

"""[nova] and [service_user]: how the conductor reaches Nova.

``[nova]`` holds the usual keystoneauth options (``auth_type``,
``auth_url``, ``username``, ..., ``cafile``, ``timeout``,
``valid_interfaces``, ``region_name``, ``endpoint_override``) of
composable's own account in Nova, and the options of the listener for
Nova's versioned notifications. Nova is *configured* when ``auth_type``
is set: only then does the conductor ask Nova anything.

The account needs Nova's admin role (or whatever Nova's policy
``os_compute_api:os-extended-server-attributes`` asks for): the host of a
server is an admin-only attribute.

``[service_user]`` is the pattern Nova and Cinder use: when a request
carries the user's token, composable calls Nova *as that user* with its
own service token attached (``X-Service-Token``), so Nova authorizes the
user (a server the user cannot see is not found) and accepts the call
even when the user's token expires meanwhile (Nova's keystonemiddleware
``service_token_roles_required``). Off by default.

Example::

    [nova]
    auth_type = password
    auth_url = http://controller/identity
    username = composable
    password = secret
    user_domain_name = Default
    project_name = service
    project_domain_name = Default
    valid_interfaces = internal
    notifications_enabled = true
    notifications_transport_url = rabbit://composable:secret@rabbit/nova

    [service_user]
    send_service_user_token = true
    auth_type = password
    auth_url = http://controller/identity
    username = composable
    password = secret
    user_domain_name = Default
    project_name = service
    project_domain_name = Default
"""

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from composable.conf import keystone_adapter

GROUP = 'nova'
SERVICE_USER_GROUP = 'service_user'
SERVICE_TYPE = 'compute'

group = cfg.OptGroup(
    GROUP, title='Nova options',
    help='How composable reaches Nova (python-novaclient) and listens to '
         'its versioned notifications.')

service_user_group = cfg.OptGroup(
    SERVICE_USER_GROUP, title='Service user options',
    help='The service token composable sends with calls it makes on behalf '
         'of a user.')

opts = [
    cfg.BoolOpt('notifications_enabled',
                default=False,
                help='Listen to Nova\'s versioned notifications: '
                     'instance.delete.end ends the instance\'s flavor-driven '
                     'leases (and unbinds the leases bound to it), '
                     'instance.create.end creates the flavor-driven leases '
                     'from the instance\'s Placement allocation and binds '
                     'them, and resize, migration, evacuation and '
                     'unshelve events move the instance\'s leases to its '
                     'new host. Needs nova.conf [notifications] '
                     'notification_format = versioned (or both).'),
    cfg.StrOpt('notifications_transport_url',
               secret=True,
               help='The oslo.messaging transport URL of the bus Nova '
                    'sends its notifications to (nova.conf '
                    '[oslo_messaging_notifications] transport_url, or '
                    'Nova\'s [DEFAULT] transport_url). Unset: composable\'s '
                    'own notification transport ([oslo_messaging_'
                    'notifications] transport_url, else [DEFAULT] '
                    'transport_url), which is only right when Nova and '
                    'composable share the RabbitMQ vhost.'),
    cfg.ListOpt('notifications_topics',
                default=['versioned_notifications'],
                help='Topics of Nova\'s versioned notifications (nova.conf '
                     '[notifications] versioned_notifications_topics).'),
    cfg.StrOpt('notifications_exchange',
               default='nova',
               help='The exchange Nova publishes on (nova.conf [DEFAULT] '
                    'control_exchange).'),
    cfg.StrOpt('notifications_pool',
               default='composable',
               help='Listener pool name. A pool gets its own queue, so '
                    'composable receives every notification without '
                    'taking any from Nova\'s other consumers (ceilometer, '
                    'searchlight, ...); the conductors of one deployment '
                    'share the pool, so each notification is handled by '
                    'one of them.'),
    cfg.IntOpt('notifications_busy_wait',
               default=30,
               min=0,
               help='Seconds a notification waits for a lease another '
                    'operation holds (binding, unbinding) before it is '
                    'put back on the queue to be handled again.'),
]

service_user_opts = [
    cfg.BoolOpt('send_service_user_token',
                default=False,
                help='When a request carries the user\'s token, call Nova '
                     'as that user with a service token of this account '
                     'attached (X-Service-Token). The service user needs '
                     'the role Nova\'s [keystone_authtoken] '
                     'service_token_roles asks for (service by '
                     'default).'),
]


def _adapter_opts():
    return keystone_adapter.adapter_opts(SERVICE_TYPE)


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)
    ks_loading.register_session_conf_options(conf, GROUP)
    ks_loading.register_auth_conf_options(conf, GROUP)
    conf.register_opts(_adapter_opts(), group=GROUP)
    conf.register_group(service_user_group)
    conf.register_opts(service_user_opts, group=service_user_group)
    ks_loading.register_session_conf_options(conf, SERVICE_USER_GROUP)
    ks_loading.register_auth_conf_options(conf, SERVICE_USER_GROUP)


def _auth_opts():
    return (ks_loading.get_session_conf_options() +
            ks_loading.get_auth_common_conf_options() +
            ks_loading.get_auth_plugin_conf_options('password') +
            ks_loading.get_auth_plugin_conf_options('v3password'))


def list_opts():
    return {group: opts + _auth_opts() + _adapter_opts(),
            service_user_group: service_user_opts + _auth_opts()}
