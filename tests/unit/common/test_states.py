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

"""The lease state machine (composable.common.states)."""

import pytest

from composable.common import states


def test_every_state_is_resting_or_transient():
    assert not states.RESTING_STATES & states.TRANSIENT_STATES
    named = {s for src, _, dst in states.TRANSITIONS for s in (src, dst)}
    assert named == states.ALL_STATES
    assert {e for _, e, _ in states.TRANSITIONS} == set(states.EVENTS)


def test_every_declared_transition_is_what_next_state_answers():
    for source, event, target in states.TRANSITIONS:
        assert states.next_state(source, event) == target
        assert states.check(source, event)


def test_undeclared_transitions_are_refused_with_a_hint():
    declared = {(s, e) for s, e, _ in states.TRANSITIONS}
    for status in states.ALL_STATES:
        for event in states.EVENTS:
            if (status, event) in declared:
                continue
            assert not states.check(status, event)
            with pytest.raises(states.InvalidTransition) as info:
                states.next_state(status, event)
            assert info.value.hint == states.hint(status, event)
    assert 'unbind it first' in states.hint(states.BOUND, states.BIND)


def test_released_is_final_and_everything_can_reach_it():
    assert not any(src == states.RELEASED for src, _, _ in states.TRANSITIONS)
    # Every state can be released: by following declared transitions.
    reaches = {states.RELEASED}
    changed = True
    while changed:
        changed = False
        for source, _, target in states.TRANSITIONS:
            if target in reaches and source not in reaches:
                reaches.add(source)
                changed = True
    assert reaches == states.ALL_STATES


def test_every_resting_state_but_released_can_be_deleted():
    for status in states.RESTING_STATES - {states.RELEASED}:
        assert states.next_state(status, states.DELETE) == states.RELEASING


def test_a_refused_placement_claim_undoes_a_reservation():
    assert states.next_state(states.RESERVED, states.FAIL) == \
        states.ALLOC_FAILED
    # Only ever from reserved: a bound lease never silently loses its
    # resources.
    assert not states.check(states.BOUND, states.FAIL)
