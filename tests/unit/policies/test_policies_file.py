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

"""An operator's policy file, and how often the enforcer looks for one
(composable.policies._Enforcer)."""

import time

from oslo_policy import policy

from composable.common import context as ctx_mod
from composable import policies

RULE = 'composable:lease:delete'


def _member():
    return ctx_mod.RequestContext(user_id='u', project_id='p1',
                                  roles=['member', 'reader'])


def test_the_policy_file_is_not_searched_for_on_every_check(
        api_env, monkeypatch):
    searches = []
    real = policy.Enforcer._get_policy_path

    def get_policy_path(self, path):
        searches.append(path)
        return real(self, path)

    monkeypatch.setattr(policy.Enforcer, '_get_policy_path',
                        get_policy_path)
    monkeypatch.setattr(policies, 'RELOAD_INTERVAL', 3600)
    for _ in range(50):
        assert policies.check(RULE, _member(), {'project_id': 'p1'})
    # One load: the policy file and each policy directory looked up once.
    assert 0 < len(searches) <= 2, searches


def test_a_new_policy_file_takes_effect_without_a_restart(
        api_env, monkeypatch, tmp_path):
    monkeypatch.setattr(policies, 'RELOAD_INTERVAL', 0.05)
    policy_file = tmp_path / 'policy.yaml'
    api_env.set_override('policy_file', str(policy_file), 'oslo_policy')
    try:
        policies.reset()
        assert policies.check(RULE, _member(), {'project_id': 'p1'})
        # The operator forbids deletes to everyone.
        policy_file.write_text('"%s": "!"\n' % RULE)
        time.sleep(0.1)
        assert not policies.check(RULE, _member(), {'project_id': 'p1'})
        # And lifts it again.
        policy_file.write_text('{}\n')
        time.sleep(0.1)
        assert policies.check(RULE, _member(), {'project_id': 'p1'})
    finally:
        api_env.clear_override('policy_file', 'oslo_policy')
        policies.reset()
