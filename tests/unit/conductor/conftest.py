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

from composable import conf
from composable.db import api as db_api
from tests.unit.conductor import harness as harness_mod

CONF = conf.CONF


@pytest.fixture
def sqlite_db(tmp_path):
    CONF.set_override('connection',
                      'sqlite:///%s' % (tmp_path / 't.sqlite'), 'database')
    db_api.reset_facade()
    db_api.create_schema_for_tests()
    yield
    db_api.reset_facade()
    CONF.clear_override('connection', 'database')


@pytest.fixture
def harness(sqlite_db):
    # Long enough for a loaded test machine; tests of timeouts use agents
    # that do not run at all, so they do not wait longer for it.
    h = harness_mod.Harness(rpc_timeout=3, fabric_timeout=3)
    h.start()
    yield h
    h.stop()


@pytest.fixture
def bare_harness(sqlite_db):
    """No agent runs."""
    h = harness_mod.Harness(rpc_timeout=1, fabric_timeout=1)
    h.start(agents=())
    yield h
    h.stop()
