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

"""The machines of extents, attachments, resizes and devices
(composable.common.states)."""

import pytest

from composable.common import exception
from composable.common import states

MACHINES = {
    'extent': (states.EXTENT_MACHINE, states.next_extent_state,
               states.EXTENT_STATES, states.EXTENT_EVENTS,
               states.EXTENT_TRANSITIONS),
    'attachment': (states.ATTACHMENT_MACHINE, states.next_attachment_state,
                   states.ATTACHMENT_STATES, states.ATTACHMENT_EVENTS,
                   states.ATTACHMENT_TRANSITIONS),
    'resize': (states.RESIZE_MACHINE, states.next_resize_state,
               states.RESIZE_STATES, states.RESIZE_EVENTS,
               states.RESIZE_TRANSITIONS),
    'device': (states.DEVICE_MACHINE, states.next_device_state,
               states.DEVICE_STATES, states.DEVICE_EVENTS,
               states.DEVICE_TRANSITIONS),
}


@pytest.fixture(params=sorted(MACHINES))
def machine(request):
    return (request.param,) + MACHINES[request.param]


def test_every_machine_is_rendered_into_the_docs():
    assert set(states.OBJECT_MACHINES) == set(MACHINES)
    for name, (machine, *_rest) in MACHINES.items():
        assert states.OBJECT_MACHINES[name] is machine
        assert machine.what == name


def test_every_state_and_event_is_in_a_transition(machine):
    _name, _machine, _next, all_states, events, transitions = machine
    assert {s for src, _, dst in transitions for s in (src, dst)} == \
        set(all_states)
    assert {e for _, e, _ in transitions} == set(events)


def test_every_declared_transition_is_allowed(machine):
    _name, declared, next_state, _states, _events, transitions = machine
    for source, event, target in transitions:
        assert next_state(source, event) == target
        assert declared.check(source, event)
        assert source in declared.sources(event)
        assert declared.target(event) == target


def test_every_undeclared_transition_is_refused_naming_what(machine):
    name, declared, next_state, all_states, events, transitions = machine
    allowed = {(s, e) for s, e, _ in transitions}
    refused = 0
    for state in all_states:
        for event in events:
            if (state, event) in allowed:
                continue
            assert not declared.check(state, event)
            with pytest.raises(states.StateChangeRefused) as info:
                next_state(state, event, ident='row-1')
            error = info.value
            assert (error.what, error.ident, error.state, error.event) == \
                (name, 'row-1', state, event)
            assert error.message.startswith(
                '%s row-1 cannot %s in state %s' % (name, event, state))
            # The API answers 409.
            assert isinstance(error, exception.Conflict)
            refused += 1
    assert refused


def test_an_extent_is_never_scrubbed_while_exported():
    assert states.EXTENT_EXPORTED not in states.EXTENT_MACHINE.sources(
        states.EXTENT_SCRUB)
    with pytest.raises(states.StateChangeRefused):
        states.next_extent_state(states.EXTENT_EXPORTED,
                                 states.EXTENT_SCRUB)


def test_a_leased_device_is_never_taken_out_of_service():
    for leased in (states.DEVICE_RESERVED, states.DEVICE_ATTACHED):
        for event in states.DEVICE_SETTING_EVENTS.values():
            assert not states.DEVICE_MACHINE.check(leased, event)


def test_only_the_events_that_change_the_pool_total_take_its_lock():
    counting = {e for e in states.DEVICE_EVENTS
                if states.device_event_counts(e)}
    assert counting == {states.DEVICE_ENABLE, states.DEVICE_MAINTAIN,
                        states.DEVICE_FAULT}


def test_the_resize_state_is_read_from_its_marks():
    grow = states.RESIZE_MARKS[states.RESIZE_GROWING]
    shrink = states.RESIZE_MARKS[states.RESIZE_SHRINKING]
    assert states.resize_state(None) == states.RESIZE_STEADY
    assert states.resize_state({grow: []}) == states.RESIZE_STEADY
    assert states.resize_state({shrink: ['x']}) == states.RESIZE_SHRINKING
    # A pending grow is settled first.
    assert states.resize_state({grow: ['x'], shrink: ['y']}) == \
        states.RESIZE_GROWING


def test_an_event_leading_to_two_states_is_not_a_machine():
    with pytest.raises(ValueError, match='leads to two states'):
        states.ObjectMachine('thing', ('a', 'b', 'c'), ('go',),
                             (('a', 'go', 'b'), ('b', 'go', 'c')))
