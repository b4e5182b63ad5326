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

"""Render the lease state machine into the documentation.

The tables are built at documentation build time from
``composable.common.states.TRANSITIONS``, so the docs can never disagree
with the state machine the conductor and the API enforce.

Usage in a page::

    .. composable-lease-states::
       :table: transitions

``:table:`` is one of ``transitions`` (one row per declared transition),
``matrix`` (states by events, each cell the next state) or ``states``
(each state, whether it is resting or transient, whether it holds
capacity, and the events it accepts).

The machines of memory extents, attachments, elastic resizes and
devices (``composable.common.states.OBJECT_MACHINES``) are rendered the
same way, one row per declared transition::

    .. composable-object-states::
       :machine: extent
"""

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

_STATE_HELP = {
    'requested': 'Created with a future ``start_at``; waits for it.',
    'allocating': 'The allocator is claiming capacity.',
    'reserved': 'Capacity is claimed; not attached anywhere.',
    'binding': 'Exports and fabric bindings are being made for a host.',
    'bound': 'Live on a host or server.',
    'unbinding': 'Exports and fabric bindings are being undone.',
    'releasing': 'Torn down and capacity returned (memory scrubbed).',
    'released': 'Over. Listed only with ``?status=released``.',
    'alloc_failed': 'Not enough free capacity; the fault says what was '
                    'free. Holds nothing.',
    'bind_failed': 'Binding failed; capacity is still held. Bind again, '
                   'unbind or delete.',
    'error': 'A teardown step failed; the conductor retries. Unbind or '
             'delete again.',
}

_EVENT_HELP = {
    'allocate': 'the conductor claims capacity (at create, or at '
                '``start_at``)',
    'bind': '``POST /v1/leases/{lease}/bind``',
    'unbind': '``POST /v1/leases/{lease}/unbind``',
    'delete': '``DELETE /v1/leases/{lease}``',
    'expire': 'the conductor, at ``end_at``',
    'done': 'the running step finished',
    'fail': 'the running step failed',
}


def _list_table(header, rows, widths=None):
    lines = ['.. list-table::', '   :header-rows: 1']
    if widths:
        lines.append('   :widths: %s' % ' '.join(str(w) for w in widths))
    lines.append('')
    for row in [header] + rows:
        first = True
        for cell in row:
            prefix = '   * - ' if first else '     - '
            lines.append(prefix + (cell or ' '))
            first = False
    lines.append('')
    return lines


def _code(value):
    return '``%s``' % value


def transitions_table(states):
    rows = [[_code(src), _code(event), _code(dst), _EVENT_HELP.get(event, '')]
            for src, event, dst in states.TRANSITIONS]
    return _list_table(['From', 'Event', 'To', 'Event comes from'], rows,
                       widths=[20, 15, 20, 45])


# The order states are listed in: the usual path of a lease first. A state
# added to the machine but missing here is listed after these.
_PREFERRED_ORDER = ('requested', 'allocating', 'alloc_failed', 'reserved',
                    'binding', 'bind_failed', 'bound', 'unbinding',
                    'releasing', 'error', 'released')


def _ordered_states(states):
    known = set(states.ALL_STATES)
    for src, _event, dst in states.TRANSITIONS:
        known.update((src, dst))
    order = [s for s in _PREFERRED_ORDER if s in known]
    order.extend(sorted(known - set(order)))
    return order


def matrix_table(states):
    table = {(src, event): dst for src, event, dst in states.TRANSITIONS}
    rows = []
    for state in _ordered_states(states):
        row = [_code(state)]
        for event in states.EVENTS:
            dst = table.get((state, event))
            row.append(_code(dst) if dst else _code('--'))
        rows.append(row)
    return _list_table(['State \\\\ event'] + list(states.EVENTS), rows)


def states_table(states):
    accepted = {}
    for src, event, _dst in states.TRANSITIONS:
        accepted.setdefault(src, []).append(event)
    rows = []
    for state in _ordered_states(states):
        kind = 'transient' if state in states.TRANSIENT_STATES else 'resting'
        holds = 'yes' if state in states.HOLDS_CAPACITY else 'no'
        events = ', '.join(_code(e) for e in accepted.get(state, [])) or \
            'none (final)'
        rows.append([_code(state), kind, holds, events,
                     _STATE_HELP.get(state, '')])
    return _list_table(['State', 'Kind', 'Holds capacity', 'Accepts',
                        'Meaning'], rows, widths=[15, 10, 10, 25, 40])


_TABLES = {
    'transitions': transitions_table,
    'matrix': matrix_table,
    'states': states_table,
}


class LeaseStatesDirective(SphinxDirective):
    has_content = False
    option_spec = {
        'table': lambda arg: directives.choice(arg, tuple(_TABLES)),
    }

    def run(self):
        from composable.common import states

        which = self.options.get('table', 'transitions')
        lines = _TABLES[which](states)
        source = 'composable.common.states.TRANSITIONS'
        node = nodes.container()
        self.state.nested_parse(StringList(lines, source=source),
                                self.content_offset, node)
        return node.children


def object_transitions_table(machine):
    rows = [[_code(src), _code(event), _code(dst)]
            for src, event, dst in machine.transitions]
    return _list_table(['From', 'Event', 'To'], rows, widths=[30, 30, 30])


class ObjectStatesDirective(SphinxDirective):
    has_content = False
    option_spec = {'machine': directives.unchanged_required}

    def run(self):
        from composable.common import states

        name = self.options.get('machine')
        if name not in states.OBJECT_MACHINES:
            raise self.error('unknown machine %r; one of %s' % (
                name, ', '.join(sorted(states.OBJECT_MACHINES))))
        lines = object_transitions_table(states.OBJECT_MACHINES[name])
        node = nodes.container()
        self.state.nested_parse(
            StringList(lines, source='composable.common.states'),
            self.content_offset, node)
        return node.children


def setup(app):
    app.add_directive('composable-lease-states', LeaseStatesDirective)
    app.add_directive('composable-object-states', ObjectStatesDirective)
    return {'parallel_read_safe': True, 'parallel_write_safe': True,
            'version': '1.0'}
