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

"""Fixtures of the compute host tests: the host guest, booted once a
module, and the Redfish emulator composing into it."""

import pytest

from tests.functional.compute_host import guest_exec
from tests.functional.compute_host import image as image_mod
from tests.functional.compute_host import stack
from tests.functional.compute_node import dataplane
from tests.functional.guest import build


@pytest.fixture(scope='module')
def host(libvirt_conn):
    """The compute host guest, running (TCG)."""
    import libvirt
    try:
        image = image_mod.build_image()
    except build.GuestUnavailable as exc:
        dataplane.unavailable(str(exc))
    cm = image_mod.running_host(libvirt_conn, image=image)
    try:
        running = cm.__enter__()
    except libvirt.libvirtError as exc:
        dataplane.unavailable('QEMU (TCG) could not start the compute host '
                              'guest: %s' % exc)
    try:
        yield running
    finally:
        cm.__exit__(None, None, None)


@pytest.fixture(scope='module')
def agent(host):
    return guest_exec.GuestAgent(host.domain)


@pytest.fixture(scope='module')
def pci(agent):
    return guest_exec.PciRunner(agent)


@pytest.fixture(scope='module')
def fabric(host):
    """The Redfish emulator composing into the host guest, through the
    project's Redfish driver (stack.Fabric)."""
    with stack.fabric(host) as composing:
        yield composing


@pytest.fixture
def composer(fabric):
    """The fabric; whatever a test left composed is decomposed after it,
    even when it failed."""
    try:
        yield fabric
    finally:
        fabric.decompose_all()
