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

"""The rules a change of a lease must keep, each written once.

The conductor checks them on the lease read under its reservation
(composable.conductor.task), where nothing else changes the lease
meanwhile. The API checks only the shape of a request and that what it
names exists, and answers with the refusal raised here: Invalid (400)
for a request that can never succeed as given, Conflict or InvalidState
(409) for one that the lease or the host it names stands against now.
"""

from composable.common import exception
from composable.common import states
from composable.common import utils


def check_end(lease, end_at, now=None):
    """``end_at`` (naive UTC, or None for no end) may become the end of
    ``lease``: the lease is not being released, and the end is ahead of
    now and after the lease's start."""
    if lease.status in (states.RELEASING, states.RELEASED):
        raise exception.InvalidState(lease=lease.uuid, status=lease.status,
                                     action='changing end_at')
    if end_at is None:
        return
    if end_at <= (now or utils.utcnow()):
        raise exception.Invalid(
            "Invalid input for field 'end_at': %s is not in the future"
            % utils.isotime(end_at))
    if lease.start_at is not None and end_at <= lease.start_at:
        raise exception.Invalid(
            "Invalid input for field 'end_at': it must be after start_at")
