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

"""Request context: who is asking, and the policy checks made for them."""

from oslo_context import context


class RequestContext(context.RequestContext):
    """The oslo.context RequestContext, with the admin flag filled from
    policy so the database layer can scope queries without a policy call."""

    def __init__(self, is_admin=None, **kwargs):
        super().__init__(is_admin=bool(is_admin), **kwargs)

    def to_policy_values(self):
        values = super().to_policy_values()
        values['project_id'] = self.project_id
        return values

    @classmethod
    def from_dict(cls, values, **kwargs):
        kwargs.setdefault('is_admin', values.get('is_admin', False))
        return super().from_dict(values, **kwargs)


def get_admin_context():
    """A context for the service's own work (periodic tasks, start-up)."""
    return RequestContext(is_admin=True, user_id='composable',
                          project_id=None, roles=['admin', 'service'],
                          overwrite=False)
