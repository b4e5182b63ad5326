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

import pytest

from tests.functional.compute_node import dataplane
from tests.functional.dataplane import env


@pytest.fixture(scope='module')
def guest(libvirt_conn):
    """The tiny guest, booted once for the module (TCG)."""
    yield from dataplane.running_tiny_guest(libvirt_conn, memory_mib=256)


@pytest.fixture(scope='module')
def shared_tgt():
    return env.Tgt()


@pytest.fixture(scope='module')
def dp(tmp_path_factory, shared_tgt, libvirt_conn):
    """The processes over the machine's tgtd, for the module."""
    stack = env.DataPlaneStack(tmp_path_factory.mktemp('dataplane'),
                               shared_tgt)
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()
