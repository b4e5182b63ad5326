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


"""The lease actions of Nova's instances, and how their unbinds finish.

Unbinds that are not the owner's: the lease stays its instance's. Their
action names say so in the lease's action log, and tell a conductor that
resumes or retries one (composable.conductor.periodic, .reconciler) how to
finish it: unbind_options gives LeaseFlows.unbind's keyword arguments.
"""

STOP = 'stop'          # the instance's domain stopped (libvirt hook)
MOVE = 'move'          # Nova moved the instance to another host
EVACUATE = 'evacuate'  # ... away from a host that is down
INSTANCE_UNBINDS = (STOP, MOVE, EVACUATE)

# Every action that starts an unbind: the owner's, and the instance's.
UNBIND_ACTIONS = ('unbind',) + INSTANCE_UNBINDS


def unbind_options(action):
    """The keyword arguments of LeaseFlows.unbind that finish an unbind
    started as ``action``: an instance's unbind keeps the lease linked to
    its instance (keep_consumer), and an evacuation's source host is down
    for good (host_gone)."""
    if action in INSTANCE_UNBINDS:
        return {'keep_consumer': True, 'host_gone': action == EVACUATE}
    return {}
