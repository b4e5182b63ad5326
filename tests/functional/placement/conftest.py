"""A real Placement (its own functional fixture: the WSGI application
behind wsgi-intercept, on an in-memory SQLite database) and composable's
SQLite file database."""

import pytest

from composable import conf
from composable.db import api as dbapi
from tests.functional.placement import base

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
