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

The states of memory extents, attachments and devices and the attach
modes are named here too: the service spells none of them as a bare
string. The Nova-side plugins (composable.nova) and the libvirt hook
import nothing of the service and keep copies; migrations keep their
literals.
"""

from automaton import machines

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
