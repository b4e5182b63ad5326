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

"""The lease state machine: declared here once, used for every transition.

Every change of ``leases.status`` goes through :func:`next_state` (the
conductor) or :func:`check` (the API, to refuse early with 409). A state
not in this module does not exist; a transition not declared here is
refused.

::

  requested -allocate-> allocating -done-> reserved -bind-> binding
                            | fail            ^               | done  | fail
                            v                 |               v       v
                      alloc_failed           |             bound  bind_failed
                                              |               |unbind  |unbind
                                              +-- done -- unbinding <---+

  any resting state (bound too) -delete/expire-> releasing -done-> released
                                                     | fail
                                                     v
                                                   error -delete-> releasing

The full table is rendered into the documentation from TRANSITIONS.

``requested`` is where a lease with a future ``start_at`` waits; the
conductor allocates it when that time comes.

Memory extents, attachments, devices and the resize of an elastic
lease have machines of their own, declared below the same way (states,
events, one table of transitions). Each event of those leads to one
state, so that a database door can make the change one compare-and-set
(``UPDATE ... WHERE state IN`` the event's declared sources, see
composable.db.api): a change the machine does not declare is refused,
never written. The attach modes are named here too: the service spells
none of these as a bare string. The Nova-side plugins
(composable.nova) and the libvirt hook import nothing of the service
and keep copies; migrations keep their literals.
"""

from automaton import machines

from composable.common import exception

# Resting states: nothing is running for the lease.
REQUESTED = 'requested'
RESERVED = 'reserved'
BOUND = 'bound'
ALLOC_FAILED = 'alloc_failed'
BIND_FAILED = 'bind_failed'
RELEASED = 'released'
ERROR = 'error'

# Transient states: an operation is under way. A conductor that dies in one
# of these leaves work for another conductor to resume.
ALLOCATING = 'allocating'
BINDING = 'binding'
UNBINDING = 'unbinding'
RELEASING = 'releasing'

TRANSIENT_STATES = frozenset([ALLOCATING, BINDING, UNBINDING, RELEASING])
RESTING_STATES = frozenset([REQUESTED, RESERVED, BOUND, ALLOC_FAILED,
                            BIND_FAILED, RELEASED, ERROR])
ALL_STATES = TRANSIENT_STATES | RESTING_STATES

# States in which a lease holds capacity in its pools.
HOLDS_CAPACITY = frozenset([RESERVED, BINDING, BOUND, BIND_FAILED, UNBINDING,
                            RELEASING, ERROR])

# Events.
ALLOCATE = 'allocate'
BIND = 'bind'
UNBIND = 'unbind'
DELETE = 'delete'
EXPIRE = 'expire'
DONE = 'done'
FAIL = 'fail'

EVENTS = (ALLOCATE, BIND, UNBIND, DELETE, EXPIRE, DONE, FAIL)

# (state, event, next state)
TRANSITIONS = (
    (REQUESTED, ALLOCATE, ALLOCATING),
    (REQUESTED, DELETE, RELEASING),
    (REQUESTED, EXPIRE, RELEASING),
    # A conductor that died while allocating left nothing committed (the
    # claim and the move to reserved are one transaction): allocate again.
    (ALLOCATING, ALLOCATE, ALLOCATING),
    (ALLOCATING, DONE, RESERVED),
    (ALLOCATING, FAIL, ALLOC_FAILED),
    (ALLOC_FAILED, DELETE, RELEASING),
    (ALLOC_FAILED, EXPIRE, RELEASING),
    # Placement refused the claim that follows the database claim: the
    # database claim is undone and the lease ends as a failed allocate.
    (RESERVED, FAIL, ALLOC_FAILED),
    (RESERVED, BIND, BINDING),
    (RESERVED, DELETE, RELEASING),
    (RESERVED, EXPIRE, RELEASING),
    (BINDING, BIND, BINDING),
    (BINDING, DONE, BOUND),
    (BINDING, FAIL, BIND_FAILED),
    (BIND_FAILED, BIND, BINDING),
    (BIND_FAILED, UNBIND, UNBINDING),
    (BIND_FAILED, DELETE, RELEASING),
    (BIND_FAILED, EXPIRE, RELEASING),
    (BOUND, UNBIND, UNBINDING),
    # Releasing tears down whatever is bound first (swapoff, logout,
    # unexport, fabric unbind), so a bound lease is deleted in one step.
    (BOUND, DELETE, RELEASING),
    (BOUND, EXPIRE, RELEASING),
    (UNBINDING, UNBIND, UNBINDING),
    (UNBINDING, DONE, RESERVED),
    (UNBINDING, FAIL, ERROR),
    (ERROR, UNBIND, UNBINDING),
    (ERROR, DELETE, RELEASING),
    (RELEASING, DELETE, RELEASING),
    (RELEASING, DONE, RELEASED),
    (RELEASING, FAIL, ERROR),
)


class StateChangeRefused(exception.Conflict):
    """An event a machine does not declare from the object's state (or
    a compare-and-set that found the object moved on)."""

    msg_fmt = ('%(what)s %(ident)s cannot %(event)s in state %(state)s: '
               'the %(what)s state machine declares no such change')

    def __init__(self, what, ident, state, event):
        self.what = what
        self.ident = ident
        self.state = state
        self.event = event
        super().__init__(what=what, ident=ident, state=state, event=event)


class ObjectMachine(object):
    """The declared machine of one kind of object (``what``): its
    states, events and transitions, built with automaton like the
    lease's. Every event leads to one state whatever its source, so that
    a door can write it as one compare-and-set from :meth:`sources`."""

    def __init__(self, what, all_states, events, transitions):
        self.what = what
        self.states = tuple(all_states)
        self.events = tuple(events)
        self.transitions = tuple(transitions)
        targets = {}
        for source, event, target in self.transitions:
            if source not in self.states or target not in self.states or \
                    event not in self.events:
                raise ValueError('%s: undeclared name in %r' % (
                    what, (source, event, target)))
            if targets.setdefault(event, target) != target:
                raise ValueError('%s: event %s leads to two states' % (
                    what, event))
        self._targets = targets
        machine = machines.FiniteMachine()
        for state in self.states:
            machine.add_state(state)
        for source, event, target in self.transitions:
            machine.add_transition(source, target, event)
        machine.freeze()
        self._machine = machine

    def machine(self):
        """The frozen automaton, for rendering into the docs."""
        return self._machine

    def next(self, state, event, ident=None):
        """The state an object in ``state`` moves to on ``event``;
        StateChangeRefused (naming the object, its state and the event)
        when the machine declares no such transition."""
        machine = self._machine.copy(shallow=True)
        try:
            machine.initialize(state)
            machine.process_event(event)
        except Exception:
            raise StateChangeRefused(self.what, ident, state, event)
        return machine.current_state

    def check(self, state, event):
        """True when ``event`` may happen to an object in ``state``."""
        try:
            self.next(state, event)
        except StateChangeRefused:
            return False
        return True

    def sources(self, event):
        """The states ``event`` is declared from, sorted."""
        found = sorted({source for source, ev, _target in self.transitions
                        if ev == event})
        if not found:
            raise ValueError('%s: no event %s' % (self.what, event))
        return found

    def target(self, event):
        """The one state ``event`` leads to."""
        return self._targets[event]


# Memory extent export states (memory_extents.export_state).
# Capacity claimed, nothing asked of the memory node yet (no backing file
# exists, nothing to scrub).
EXTENT_ALLOCATED = 'allocated'
# A target serves the extent to the bound host.
EXTENT_EXPORTED = 'exported'
# No target any more, but the backing file may hold what the lease wrote:
# it must be scrubbed before the capacity is returned.
EXTENT_UNEXPORTED = 'unexported'
# The backing file is gone.
EXTENT_SCRUBBED = 'scrubbed'
EXTENT_STATES = (EXTENT_ALLOCATED, EXTENT_EXPORTED, EXTENT_UNEXPORTED,
                 EXTENT_SCRUBBED)

# Extent events.
# The memory node exports the extent to the bound host (again, when a
# bind resumes).
EXTENT_EXPORT = 'export'
# The export is removed (or found gone on its memory node).
EXTENT_UNEXPORT = 'unexport'
# The backing file is erased and removed.
EXTENT_SCRUB = 'scrub'
EXTENT_EVENTS = (EXTENT_EXPORT, EXTENT_UNEXPORT, EXTENT_SCRUB)

EXTENT_TRANSITIONS = (
    (EXTENT_ALLOCATED, EXTENT_EXPORT, EXTENT_EXPORTED),
    (EXTENT_EXPORTED, EXTENT_EXPORT, EXTENT_EXPORTED),
    (EXTENT_UNEXPORTED, EXTENT_EXPORT, EXTENT_EXPORTED),
    (EXTENT_EXPORTED, EXTENT_UNEXPORT, EXTENT_UNEXPORTED),
    (EXTENT_UNEXPORTED, EXTENT_UNEXPORT, EXTENT_UNEXPORTED),
    # Credentials were stored before the export call, whose answer never
    # came: the node may export it, so it is unexported all the same.
    (EXTENT_ALLOCATED, EXTENT_UNEXPORT, EXTENT_UNEXPORTED),
    # Never while exported: the bound host could still write to it.
    (EXTENT_ALLOCATED, EXTENT_SCRUB, EXTENT_SCRUBBED),
    (EXTENT_UNEXPORTED, EXTENT_SCRUB, EXTENT_SCRUBBED),
    (EXTENT_SCRUBBED, EXTENT_SCRUB, EXTENT_SCRUBBED),
)

EXTENT_MACHINE = ObjectMachine('extent', EXTENT_STATES, EXTENT_EVENTS,
                               EXTENT_TRANSITIONS)


def next_extent_state(state, event, ident=None):
    """The export state an extent in ``state`` moves to on ``event``;
    StateChangeRefused when undeclared."""
    return EXTENT_MACHINE.next(state, event, ident)


# Attachment states (attachments.state).
# The agent is asked to attach the lease's resources.
ATT_ATTACHING = 'attaching'
# The resources are attached to the host or guest.
ATT_ATTACHED = 'attached'
# The agent is asked to detach them.
ATT_DETACHING = 'detaching'
# Detached cleanly: nothing is left on the host.
ATT_DETACHED = 'detached'
# Attaching or detaching failed: something may be left on the host.
ATT_FAILED = 'failed'
# Attachments that may still hold something on their host.
LIVE_ATTACHMENT_STATES = [ATT_ATTACHING, ATT_ATTACHED, ATT_DETACHING,
                          ATT_FAILED]
ATTACHMENT_STATES = (ATT_ATTACHING, ATT_ATTACHED, ATT_DETACHING,
                     ATT_DETACHED, ATT_FAILED)

# Attachment events.
# A bind (again) asks the host's agent to attach.
ATT_ATTACH = 'attach'
# The agent answered: attached.
ATT_ATTACH_DONE = 'attach_done'
# A teardown asks the host's agent to detach.
ATT_DETACH = 'detach'
# Every step of the teardown for this host succeeded.
ATT_DETACH_DONE = 'detach_done'
# A step of the teardown failed: something may be left there.
ATT_DETACH_FAIL = 'detach_fail'
ATTACHMENT_EVENTS = (ATT_ATTACH, ATT_ATTACH_DONE, ATT_DETACH,
                     ATT_DETACH_DONE, ATT_DETACH_FAIL)

ATTACHMENT_TRANSITIONS = (
    # A bind resumed, or a bind after a failed one, on the same host:
    # its live attachment there is reused.
    (ATT_ATTACHING, ATT_ATTACH, ATT_ATTACHING),
    (ATT_ATTACHED, ATT_ATTACH, ATT_ATTACHING),
    (ATT_DETACHING, ATT_ATTACH, ATT_ATTACHING),
    (ATT_FAILED, ATT_ATTACH, ATT_ATTACHING),
    (ATT_ATTACHING, ATT_ATTACH_DONE, ATT_ATTACHED),
    (ATT_ATTACHING, ATT_DETACH, ATT_DETACHING),
    (ATT_ATTACHED, ATT_DETACH, ATT_DETACHING),
    (ATT_DETACHING, ATT_DETACH, ATT_DETACHING),
    (ATT_FAILED, ATT_DETACH, ATT_DETACHING),
    (ATT_DETACHING, ATT_DETACH_DONE, ATT_DETACHED),
    (ATT_DETACHING, ATT_DETACH_FAIL, ATT_FAILED),
)

ATTACHMENT_MACHINE = ObjectMachine('attachment', ATTACHMENT_STATES,
                                   ATTACHMENT_EVENTS, ATTACHMENT_TRANSITIONS)


def next_attachment_state(state, event, ident=None):
    """The state an attachment in ``state`` moves to on ``event``;
    StateChangeRefused when undeclared."""
    return ATTACHMENT_MACHINE.next(state, event, ident)


# The resize of an elastic lease, as its live attachment records it:
# marks in the attachment's details, written before a resize touches
# anything outside the database and removed when it ends, so that a
# conductor that dies in between leaves them for the next pass (which
# rolls an interrupted grow back and finishes an interrupted shrink).
# Nothing pending.
RESIZE_STEADY = 'steady'
# A grow claimed extents (listed under RESIZE_MARKS[RESIZE_GROWING])
# that may not have reached the host.
RESIZE_GROWING = 'growing'
# A shrink asked the host to let extents go (listed under its mark).
RESIZE_SHRINKING = 'shrinking'
RESIZE_STATES = (RESIZE_STEADY, RESIZE_GROWING, RESIZE_SHRINKING)
# The key of the details holding each pending state's extent uuids.
RESIZE_MARKS = {RESIZE_GROWING: 'elastic_grow',
                RESIZE_SHRINKING: 'elastic_shrink'}

# Resize events.
RESIZE_GROW = 'grow'
# The grow ended: its extents attached, or taken back.
RESIZE_GROW_ENDED = 'grow_ended'
RESIZE_SHRINK = 'shrink'
# The shrink ended: its extents given back, or kept by the host.
RESIZE_SHRINK_ENDED = 'shrink_ended'
RESIZE_EVENTS = (RESIZE_GROW, RESIZE_GROW_ENDED, RESIZE_SHRINK,
                 RESIZE_SHRINK_ENDED)

RESIZE_TRANSITIONS = (
    (RESIZE_STEADY, RESIZE_GROW, RESIZE_GROWING),
    (RESIZE_GROWING, RESIZE_GROW_ENDED, RESIZE_STEADY),
    (RESIZE_STEADY, RESIZE_SHRINK, RESIZE_SHRINKING),
    (RESIZE_SHRINKING, RESIZE_SHRINK_ENDED, RESIZE_STEADY),
)

RESIZE_MACHINE = ObjectMachine('resize', RESIZE_STATES, RESIZE_EVENTS,
                               RESIZE_TRANSITIONS)


def resize_state(details):
    """The resize state ``details`` (an attachment's) record: a pending
    grow first (settled first), then a pending shrink, else steady."""
    details = details or {}
    for state in (RESIZE_GROWING, RESIZE_SHRINKING):
        if details.get(RESIZE_MARKS[state]):
            return state
    return RESIZE_STEADY


def next_resize_state(state, event, ident=None):
    """The resize state ``state`` moves to on ``event``;
    StateChangeRefused when undeclared."""
    return RESIZE_MACHINE.next(state, event, ident)


# Device states (devices.state).
# Free: a lease may claim the device.
DEVICE_AVAILABLE = 'available'
# Held by a lease, not attached to a host.
DEVICE_RESERVED = 'reserved'
# Held by a lease and attached to its host.
DEVICE_ATTACHED = 'attached'
# Taken out of service by an operator.
DEVICE_MAINTENANCE = 'maintenance'
# Broken: not leased until an operator makes it available again.
DEVICE_FAULTY = 'faulty'
DEVICE_STATES = (DEVICE_AVAILABLE, DEVICE_RESERVED, DEVICE_ATTACHED,
                 DEVICE_MAINTENANCE, DEVICE_FAULTY)
# States an operator may set; reserved and attached follow the leases.
DEVICE_SETTABLE_STATES = (DEVICE_AVAILABLE, DEVICE_MAINTENANCE,
                          DEVICE_FAULTY)
# States of devices that count in their pool's inventory.
DEVICE_IN_SERVICE_STATES = (DEVICE_AVAILABLE, DEVICE_RESERVED,
                            DEVICE_ATTACHED)

# Device events.
# The allocator claims a free device for a lease.
DEVICE_CLAIM = 'claim'
# The fabric bound it to the lease's host and the host attached it.
DEVICE_ATTACH = 'attach'
# The host let it go and the fabric unbound it.
DEVICE_DETACH = 'detach'
# The lease gives it back (release, or a trade for a reachable one).
DEVICE_FREE = 'free'
# An operator (or the fabric sync) puts it back in service.
DEVICE_ENABLE = 'enable'
# Taken out of service (an operator, or the fabric sync).
DEVICE_MAINTAIN = 'maintain'
# Found broken.
DEVICE_FAULT = 'fault'
DEVICE_EVENTS = (DEVICE_CLAIM, DEVICE_ATTACH, DEVICE_DETACH, DEVICE_FREE,
                 DEVICE_ENABLE, DEVICE_MAINTAIN, DEVICE_FAULT)

DEVICE_TRANSITIONS = (
    (DEVICE_AVAILABLE, DEVICE_CLAIM, DEVICE_RESERVED),
    (DEVICE_RESERVED, DEVICE_ATTACH, DEVICE_ATTACHED),
    # A bind resumed after the host attached it.
    (DEVICE_ATTACHED, DEVICE_ATTACH, DEVICE_ATTACHED),
    (DEVICE_ATTACHED, DEVICE_DETACH, DEVICE_RESERVED),
    # A teardown after a bind that failed before the host attached it.
    (DEVICE_RESERVED, DEVICE_DETACH, DEVICE_RESERVED),
    (DEVICE_RESERVED, DEVICE_FREE, DEVICE_AVAILABLE),
    (DEVICE_ATTACHED, DEVICE_FREE, DEVICE_AVAILABLE),
    # Out of service and back: never while leased (its state follows
    # the lease then).
    (DEVICE_MAINTENANCE, DEVICE_ENABLE, DEVICE_AVAILABLE),
    (DEVICE_FAULTY, DEVICE_ENABLE, DEVICE_AVAILABLE),
    (DEVICE_AVAILABLE, DEVICE_MAINTAIN, DEVICE_MAINTENANCE),
    (DEVICE_FAULTY, DEVICE_MAINTAIN, DEVICE_MAINTENANCE),
    (DEVICE_AVAILABLE, DEVICE_FAULT, DEVICE_FAULTY),
    (DEVICE_MAINTENANCE, DEVICE_FAULT, DEVICE_FAULTY),
)

DEVICE_MACHINE = ObjectMachine('device', DEVICE_STATES, DEVICE_EVENTS,
                               DEVICE_TRANSITIONS)

# The event an operator's (or the fabric sync's) state is set by.
DEVICE_SETTING_EVENTS = {DEVICE_AVAILABLE: DEVICE_ENABLE,
                         DEVICE_MAINTENANCE: DEVICE_MAINTAIN,
                         DEVICE_FAULTY: DEVICE_FAULT}


def next_device_state(state, event, ident=None):
    """The state a device in ``state`` moves to on ``event``;
    StateChangeRefused when undeclared."""
    return DEVICE_MACHINE.next(state, event, ident)


def device_event_counts(event):
    """Whether ``event`` can change how many devices of their pool are in
    service (its pool's total): the door takes the pool's lock then."""
    in_service = DEVICE_MACHINE.target(event) in DEVICE_IN_SERVICE_STATES
    return any((source in DEVICE_IN_SERVICE_STATES) != in_service
               for source in DEVICE_MACHINE.sources(event))


#: Every machine besides the lease's, by the name the docs render it as.
OBJECT_MACHINES = {'extent': EXTENT_MACHINE,
                   'attachment': ATTACHMENT_MACHINE,
                   'resize': RESIZE_MACHINE,
                   'device': DEVICE_MACHINE}


# Attach modes (leases.attach_mode): how pooled memory reaches the instance.
# The compute host swaps to the remote memory (the default).
ATTACH_HOST = 'host'
# A network disk hot-plugged into the guest.
ATTACH_GUEST = 'guest'
# CXL memory onlined on the host as a NUMA node, then plugged into the
# guest by a virtio-mem device pinned to that node (API 1.6).
ATTACH_VIRTIO_MEM = 'virtio-mem'
ATTACH_MODES = (ATTACH_HOST, ATTACH_GUEST, ATTACH_VIRTIO_MEM)
# The modes that go to a server, and so need one at bind.
SERVER_ATTACH_MODES = (ATTACH_GUEST, ATTACH_VIRTIO_MEM)

# Hints for a user whose request is refused in a state.
_HINTS = {
    (BINDING, DELETE): ' Wait until binding ends, then delete it.',
    (UNBINDING, DELETE): ' Wait until unbinding ends, then delete it.',
    (ALLOCATING, DELETE): ' Wait until allocation ends, then delete it.',
    (RELEASED, DELETE): ' It is released already.',
    (BINDING, UNBIND): ' Wait until binding ends.',
    (RESERVED, UNBIND): ' It is not bound.',
    (BOUND, BIND): ' It is bound already; unbind it first.',
    (ALLOC_FAILED, BIND): ' It holds no resources; delete it and create a '
                          'new lease.',
    (REQUESTED, BIND): ' It has not started yet (see start_at).',
}


def _build():
    machine = machines.FiniteMachine()
    for state in sorted(ALL_STATES):
        machine.add_state(state, terminal=(state == RELEASED))
    for source, event, target in TRANSITIONS:
        machine.add_transition(source, target, event)
    machine.freeze()
    return machine


_MACHINE = _build()


class InvalidTransition(Exception):
    def __init__(self, status, event):
        self.status = status
        self.event = event
        self.hint = _HINTS.get((status, event), '')
        super().__init__('%s is not possible in state %s' % (event, status))


def next_state(status, event):
    """The state a lease in ``status`` moves to on ``event``.

    Raises InvalidTransition when the machine declares no such transition.
    """
    machine = _MACHINE.copy(shallow=True)
    try:
        # initialize() refuses a terminal state (released) itself.
        machine.initialize(status)
        machine.process_event(event)
    except Exception:
        raise InvalidTransition(status, event)
    return machine.current_state


def check(status, event):
    """True when ``event`` may happen to a lease in ``status``."""
    try:
        next_state(status, event)
    except InvalidTransition:
        return False
    return True


def hint(status, event):
    return _HINTS.get((status, event), '')


def machine():
    """The frozen automaton, for rendering into the docs."""
    return _MACHINE
