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

"""A real Placement (its own functional fixture: the WSGI application
behind wsgi-intercept, on an in-memory SQLite database) and composable's
SQLite file database."""

import pytest

from composable import conf
from composable.db import api as dbapi
from tests.functional.placement import base
from tests.unit.conductor import harness as harness_mod

CONF = conf.CONF


@pytest.fixture
def composable_db(tmp_path):
    CONF.set_override('connection',
                      'sqlite:///%s' % (tmp_path / 'composable.sqlite'),
                      'database')
    dbapi.reset_facade()
    dbapi.create_schema_for_tests()
    yield
    dbapi.reset_facade()
    CONF.clear_override('connection', 'database')


@pytest.fixture
def placement():
    fixture = base.RealPlacement()
    fixture.setUp()
    try:
        yield fixture
    finally:
        fixture.cleanUp()


@pytest.fixture
def client(placement):
    return placement.client()


@pytest.fixture
def placement_conf(placement):
    with base.placement_configured(placement.endpoint) as overrides:
        yield overrides


@pytest.fixture
def harness(composable_db, placement_conf):
    """A conductor with its agents (tests/unit/conductor/harness.py) on
    composable's SQLite database, using the Placement fixture."""
    h = harness_mod.Harness(rpc_timeout=5, fabric_timeout=5)
    h.start()
    try:
        yield h
    finally:
        h.stop()
