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

"""Personas shared by every resource's rules.

Keystone's default roles imply each other (admin > member > reader), so a
member's token carries the reader role too; the rules still name member
explicitly so that deployments without implied roles behave the same.
"""

from oslo_policy import policy

ADMIN = 'role:admin'
SERVICE = 'role:service'
PROJECT_MEMBER = 'role:member and project_id:%(project_id)s'
PROJECT_READER = 'role:reader and project_id:%(project_id)s'

RULE_ADMIN = 'rule:admin'

ADMIN_OR_SERVICE = 'rule:admin or rule:service'
# Anyone with a role on a project: pools are shared inventory that every
# project may look at before it leases from them.
ANY_READER = ('rule:admin or rule:service or role:member or role:reader')
# Writes are the project's own (and the administrator's): Nova's side
# only reads leases; the conductor binds and releases them for Nova's
# instances itself, from Nova's notifications.
LEASE_MEMBER = 'rule:admin or rule:project_member'
LEASE_READER = ('rule:admin or rule:service or rule:project_member or '
                'rule:project_reader')

SCOPE_TYPES = ['project']

rules = [
    policy.RuleDefault(
        'context_is_admin', ADMIN,
        description='Who is an administrator: sees every project\'s leases '
                    'and the admin-only fields of a lease.'),
    policy.RuleDefault('admin', ADMIN,
                       description='The administrator persona.'),
    policy.RuleDefault('service', SERVICE,
                       description='Other OpenStack services (Nova).'),
    policy.RuleDefault('project_member', PROJECT_MEMBER,
                       description='A member of the project owning the '
                                   'target.'),
    policy.RuleDefault('project_reader', PROJECT_READER,
                       description='A reader of the project owning the '
                                   'target.'),
]


def crud_rules(resource, plural, path, check_str, description, overrides=None):
    """Create/get/list/update/delete rules of one admin-managed resource.

    ``overrides`` maps an action to a different check string.
    """
    overrides = overrides or {}
    operations = {
        'create': ([{'path': '/v1/%s' % path, 'method': 'POST'}],
                   'Create a %s.' % description),
        'get': ([{'path': '/v1/%s/{%s_ident}' % (path, resource),
                  'method': 'GET'}],
                'Show a %s.' % description),
        'list': ([{'path': '/v1/%s' % path, 'method': 'GET'}],
                 'List %s.' % plural),
        'update': ([{'path': '/v1/%s/{%s_ident}' % (path, resource),
                     'method': 'PATCH'}],
                   'Update a %s.' % description),
        'delete': ([{'path': '/v1/%s/{%s_ident}' % (path, resource),
                     'method': 'DELETE'}],
                   'Delete a %s.' % description),
    }
    result = []
    for action in ('create', 'get', 'list', 'update', 'delete'):
        ops, text = operations[action]
        result.append(policy.DocumentedRuleDefault(
            name='composable:%s:%s' % (resource, action),
            check_str=overrides.get(action, check_str),
            description=text,
            operations=ops,
            scope_types=SCOPE_TYPES))
    return result


def list_rules():
    return rules
