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

"""The ``openstack`` command of this environment (python-openstackclient's
own entry point, with every plugin it finds), with one difference: while
``stack create/update/delete/suspend/resume/check --wait`` waits,
heatclient reads the stack's events every second rather than every five.

Only ``stack create`` has an option for that (``--poll``); the other
actions wait five seconds between reads. A stack action of these tests
ends in a second or two, so most of every wait would be the poll
interval; what is waited for, and how the end is recognised, are
heatclient's own.

Usage: python openstack_cli.py ARGS... (as ``openstack ARGS...``)
"""

import sys

from heatclient.common import event_utils

# Seconds between two reads of a stack's events while a command waits.
POLL_SECONDS = 1

_poll_for_events = event_utils.poll_for_events


def poll_for_events(*args, **kwargs):
    kwargs['poll_period'] = POLL_SECONDS
    return _poll_for_events(*args, **kwargs)


def main():
    event_utils.poll_for_events = poll_for_events
    # cliff names the program after sys.argv[0] when its shell is
    # imported: the same name as the command's, in help and messages.
    sys.argv[0] = 'openstack'
    from openstackclient import shell
    return shell.main()


if __name__ == '__main__':
    sys.exit(main())
