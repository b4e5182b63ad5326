"""Every test here runs on a new SQLite file database with the schema of
the models."""

import pytest

from composable import conf
from composable.db import api as dbapi

CONF = conf.CONF


@pytest.fixture(autouse=True)
def sqlite_db(tmp_path):
    CONF.set_override('connection',
                      'sqlite:///%s' % (tmp_path / 'composable.sqlite'),
                      'database')
    dbapi.reset_facade()
    dbapi.create_schema_for_tests()
    yield
    dbapi.reset_facade()
    CONF.clear_override('connection', 'database')
