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

"""The policy matrix of the documentation is the one the rules give."""

import os

from composable import policies
from composable.policies import matrix

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
INCLUDE = os.path.join(ROOT, 'doc', 'source', 'admin', 'policy-matrix.inc')


def test_documented_matrix_is_current():
    with open(INCLUDE) as f:
        written = f.read()
    assert written == matrix.render_rst(), (
        'doc/source/admin/policy-matrix.inc is out of date: run '
        '"python -m composable.policies.matrix > '
        'doc/source/admin/policy-matrix.inc"')


def test_every_documented_rule_has_a_row():
    names = {row.rule for row in matrix.rows()}
    assert names == {r.name for r in policies.list_rules()
                     if getattr(r, 'operations', None)}
    assert 'composable:lease:bind' in names


def test_another_projects_lease_is_not_found_never_forbidden():
    for row in matrix.rows():
        if matrix.on_one_lease(row.path):
            for persona in ('other_member', 'other_reader'):
                assert row.outcomes[persona] == matrix.NOT_FOUND, row
        else:
            assert matrix.NOT_FOUND not in row.outcomes.values(), row


def test_outcome_follows_the_rules():
    enforcer = matrix._enforcer()
    reader = dict((p.name, p) for p in matrix.PERSONAS)['reader']
    assert matrix.outcome(enforcer, 'composable:lease:get',
                          '/v1/leases/{lease_ident}', reader) == \
        matrix.ALLOWED
    assert matrix.outcome(enforcer, 'composable:lease:bind',
                          '/v1/leases/{lease_ident}/bind', reader) == \
        matrix.FORBIDDEN
    assert matrix.outcome(enforcer, 'composable:fabric:create',
                          '/v1/fabrics', reader) == matrix.FORBIDDEN
