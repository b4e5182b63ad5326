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

"""[placement]: how composable reaches the Placement service.

The usual keystoneauth options (``auth_type``, ``auth_url``, ``username``,
..., ``cafile``, ``timeout``, ``valid_interfaces``, ``region_name``,
``endpoint_override``), registered exactly as Nova registers its own
``[placement]`` group, so a process that loads both (tests, all-in-one
deployments) sees one set of options and no conflict, plus a few options
of composable's own.

Example::

    [placement]
    auth_type = password
    auth_url = http://controller/identity
    username = composable
    password = secret
    user_domain_name = Default
    project_name = service
    project_domain_name = Default
    valid_interfaces = internal
"""

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from composable.conf import keystone_adapter

GROUP = 'placement'
SERVICE_TYPE = 'placement'

group = cfg.OptGroup(
    GROUP, title='Placement service options',
    help='How composable reaches the Placement service, where each pool is '
         'a sharing resource provider and each lease a consumer.')

opts = [
    cfg.BoolOpt('composable_enabled',
                default=None,
                help='Whether composable reports to Placement: pools as '
                     'sharing resource providers, leases as consumers '
                     'holding what they were given. Unset (the default): '
                     'on when [placement]auth_type is set, so configuring '
                     'the credentials is enough; true: on (the conductor '
                     'refuses to start without credentials); false: off, '
                     'as for a standalone deployment without Nova. With '
                     'it off, Nova can give the pools\' capacity to '
                     'instances a second time.'),
    cfg.IntOpt('composable_reconcile_interval',
               default=60,
               min=0,
               help='Seconds between two passes of the conductor that '
                    'make Placement match the database: providers, traits, '
                    'aggregates and inventories of the pools, allocations '
                    'of the leases (missing ones written, stale ones '
                    'deleted). Each correction is logged. 0 disables the '
                    'periodic pass; pool changes and lease claims still '
                    'reach Placement at once.'),
    cfg.IntOpt('composable_generation_retries',
               default=5,
               min=0,
               help='Times a Placement write is retried after a generation '
                    'conflict (409 placement.concurrent_update): the '
                    'provider or consumer generation is read again and the '
                    'write repeated.'),
    cfg.IntOpt('composable_claim_batch_size',
               default=100,
               min=0,
               help='Most lease claims and releases the conductor writes '
                    'to Placement in one request (POST /allocations). '
                    'Claims arriving while a request is under way are '
                    'written together in the next one, so under load a '
                    'lease costs well under one Placement call. 0: one '
                    'lease per request, each read back and checked as '
                    'before.'),
    cfg.FloatOpt('composable_unavailable_wait',
                 default=5.0,
                 min=0,
                 help='Seconds a batch of lease claims keeps being retried '
                      'while Placement cannot be reached or answers 5xx '
                      '(the lease creations wait), before those leases '
                      'fail with a fault saying Placement could not be '
                      'reached.'),
    cfg.BoolOpt('composable_delete_orphan_providers',
                default=True,
                help='Whether the reconciler deletes the sharing resource '
                     'providers of pools that no longer exist (never one '
                     'that still holds allocations of Nova instances).'),
]


def _adapter_opts():
    return keystone_adapter.adapter_opts(SERVICE_TYPE)


def enabled(conf):
    """Whether composable reports to Placement (see composable_enabled)."""
    group = conf[GROUP]
    if group.composable_enabled is not None:
        return group.composable_enabled
    return bool(group.auth_type)


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)
    ks_loading.register_session_conf_options(conf, GROUP)
    ks_loading.register_auth_conf_options(conf, GROUP)
    conf.register_opts(_adapter_opts(), group=GROUP)


def list_opts():
    return {group: (
        opts +
        ks_loading.get_session_conf_options() +
        ks_loading.get_auth_common_conf_options() +
        ks_loading.get_auth_plugin_conf_options('password') +
        ks_loading.get_auth_plugin_conf_options('v3password') +
        _adapter_opts())}
