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

"""The interface every fabric driver implements.

A fabric driver runs in the conductor. It connects a pooled PCIe device to
a host's partition on the fabric (``bind_device``) and disconnects it
(``unbind_device``). Both calls must be idempotent: the conductor repeats
them when it resumes work another conductor left unfinished, and after a
timeout it cannot know whether the fabric did the work.

``fabric``, ``device`` and ``host`` are plain dicts of the database rows
(the column names of composable.db.models). ``fabric['driver_info']`` may
hold credentials: drivers never log it and never put it in exceptions.
"""

import abc


class FabricDriver(object, metaclass=abc.ABCMeta):

    # True for drivers that touch no hardware; the conductor and the
    # standalone service say so in their logs.
    simulated = False

    @abc.abstractmethod
    def validate_driver_info(self, driver_info):
        """Check a fabric's connection settings.

        Raises composable.common.exception.Invalid naming the bad key.
        """

    @abc.abstractmethod
    def bind_device(self, fabric, device, host):
        """Connect ``device`` to ``host``; return its PCI address there
        (``"0000:41:00.0"``). Binding a device that is already bound to
        that host returns the same address."""

    @abc.abstractmethod
    def unbind_device(self, fabric, device, host):
        """Disconnect ``device`` from ``host``. Unbinding a device that is
        not bound succeeds."""
