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

"""oslo.policy's signature inspection of checks, remembered per function
(composable.policies._RememberedArgspecs)."""

import inspect

from oslo_policy import _checks

from composable import policies


class NewStyleCheck(_checks.BaseCheck):
    def __init__(self):
        self.calls = []

    def __str__(self):
        return 'new'

    def __call__(self, target, creds, enforcer, current_rule=None):
        self.calls.append(current_rule)
        return True


class LegacyCheck(_checks.BaseCheck):
    def __init__(self):
        self.calls = 0

    def __str__(self):
        return 'legacy'

    def __call__(self, target, creds, enforcer):
        self.calls += 1
        return False


def test_checks_get_the_arguments_they_take():
    assert isinstance(_checks.inspect, policies._RememberedArgspecs)
    # Anything but getfullargspec is the real module's.
    assert _checks.inspect.signature is inspect.signature
    new, legacy = NewStyleCheck(), LegacyCheck()
    for _ in range(2):
        assert _checks._check(new, {}, {}, None, 'a:rule') is True
        assert _checks._check(legacy, {}, {}, None, 'a:rule') is False
    assert new.calls == ['a:rule', 'a:rule']
    assert legacy.calls == 2


def test_each_signature_is_inspected_once():
    inspected = []

    def getfullargspec(func):
        inspected.append(func)
        return inspect.getfullargspec(func)

    remembered = policies._RememberedArgspecs(
        type('M', (), {'getfullargspec': staticmethod(getfullargspec)}))
    checks = [NewStyleCheck(), NewStyleCheck(), LegacyCheck()]
    for check in checks * 3:
        remembered.getfullargspec(check.__call__)
    # One inspection per class's __call__, however many checks and calls.
    assert len(inspected) == 2


def test_policy_results_unchanged(api_env):
    from composable.common import context as ctx_mod
    member = ctx_mod.RequestContext(user_id='u', project_id='p1',
                                    roles=['member', 'reader'])
    assert policies.check('composable:lease:delete', member,
                          {'project_id': 'p1'})
    assert not policies.check('composable:lease:delete', member,
                              {'project_id': 'p2'})
    assert not policies.check('context_is_admin', member)
