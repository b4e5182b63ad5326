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

"""Fixtures of the fabric driver tests.

These tests talk HTTP to an emulated Redfish service in a thread of the
test process; they need no database, message bus, libvirt or root, and
leave nothing outside the process, so the functional suite's leftover
check (which lists the machine's shared services) is not run for them.
"""

import contextlib

import pytest

from tests.functional.fabric import redfish_emulator
from tests.functional.fabric import root_reads as root_reads_


@pytest.fixture(scope='session', autouse=True)
def nothing_left_behind():
    yield


@pytest.fixture
def driver():
    from composable.fabric.redfish import driver as redfish_driver
    return redfish_driver.RedfishFabricDriver()


@pytest.fixture
def emulator():
    """A fresh emulator with the default inventory: (url, emulator)."""
    url, stop, emu = redfish_emulator.serve()
    try:
        yield url, emu
    finally:
        stop()


@pytest.fixture
def profile():
    """Starts emulators of a named profile (redfish_emulator.PROFILES)
    or a config: ``profile('duplicate-names')`` -> (url, emulator)."""
    stops = []

    def start(config):
        if isinstance(config, str):
            config = redfish_emulator.PROFILES[config]
        url, stop, emu = redfish_emulator.serve(config=config)
        stops.append(stop)
        return url, emu

    try:
        yield start
    finally:
        for stop in stops:
            stop()


@pytest.fixture
def stack_on(tmp_path, profile):
    """Starts the API in process, a conductor and a compute agent on a
    Redfish fabric of an emulator profile (see redfish_stack.running):
    ``stack_on('zones')`` -> (harness, API client, URL, emulator)."""
    # Imported here: most fabric tests need no API or conductor.
    from tests.functional.fabric import redfish_stack

    with contextlib.ExitStack() as stack:
        def start(config):
            return stack.enter_context(
                redfish_stack.running(tmp_path, profile(config)))

        yield start


@pytest.fixture
def root_reads(monkeypatch):
    """The service root reads of the test's redfish connections
    (root_reads.record)."""
    return root_reads_.record(monkeypatch)
