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

from oslo_policy import policy

from composable.policies import base

_LEASE = '/v1/leases/{lease_ident}'


def _rule(name, check_str, description, path, method):
    return policy.DocumentedRuleDefault(
        name='composable:lease:%s' % name,
        check_str=check_str,
        description=description,
        operations=[{'path': path, 'method': method}],
        scope_types=base.SCOPE_TYPES)


rules = [
    _rule('create', base.LEASE_MEMBER, 'Create a lease in a project.',
          '/v1/leases', 'POST'),
    _rule('get', base.LEASE_READER, 'Show a lease.', _LEASE, 'GET'),
    _rule('list', base.LEASE_READER, 'List the leases of a project.',
          '/v1/leases', 'GET'),
    _rule('list:all_projects', base.ADMIN_OR_SERVICE,
          'List the leases of every project, or of another project '
          '(all_projects and project_id filters).',
          '/v1/leases', 'GET'),
    _rule('update', base.LEASE_MEMBER,
          'Change the name, description or end of a lease.', _LEASE,
          'PATCH'),
    _rule('delete', base.LEASE_MEMBER, 'Delete (release) a lease.', _LEASE,
          'DELETE'),
    _rule('bind', base.LEASE_MEMBER, 'Bind a lease to a host or server.',
          _LEASE + '/bind', 'POST'),
    _rule('unbind', base.LEASE_MEMBER, 'Unbind a lease.', _LEASE + '/unbind',
          'POST'),
    _rule('action:list', base.LEASE_READER, 'List the actions of a lease.',
          _LEASE + '/actions', 'GET'),
]


def list_rules():
    return rules
