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

import logging
import uuid

import pytest

from composable import conf
from composable.memory import tmpfs
from composable import privsep
from composable.privsep import memory as priv_memory
from tests.unit.memory import fakes

CONF = conf.CONF

SECRET = 'S3cr3t-chap-Pa55word'
INITIATOR = 'iqn.2026-11.org.example:compute-1'


@pytest.fixture
def privsep_in_process():
    """Run privileged functions in this process (as the test user)."""
    privsep.sys_admin_pctxt.set_client_mode(False)
    yield
    privsep.sys_admin_pctxt.set_client_mode(True)


@pytest.fixture
def memory_conf():
    CONF.set_override('portal', '192.0.2.10:3260', 'memory_node')
    yield CONF.memory_node
    for opt in ('portal', 'transport', 'allow_overcommit'):
        CONF.clear_override(opt, 'memory_node')


@pytest.fixture
def area(tmp_path, privsep_in_process):
    """A tmpfs area on a plain temporary directory."""
    return tmpfs.TmpfsArea(path=str(tmp_path), ops=priv_memory,
                           require_tmpfs=False, node_name='mem-1')


@pytest.fixture
def fake_tgtadm():
    return fakes.FakeTgtadm()


def make_extent(size_mb=4, transport='tcp', **extra):
    extent = {'uuid': str(uuid.uuid4()), 'index': 0, 'size_mb': size_mb,
              'lease_uuid': str(uuid.uuid4()), 'memory_node': 'mem-1',
              'portal': '198.51.100.7:3260', 'transport': transport}
    extent.update(extra)
    return extent


@pytest.fixture
def all_logs():
    """Every record of every logger, at DEBUG, as formatted text."""
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(self.format(record))

    handler = Keep(level=logging.DEBUG)
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield records
    root.removeHandler(handler)
    root.setLevel(old_level)
