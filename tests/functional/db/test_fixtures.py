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

"""The shared database fixtures of tests/functional do what they say."""

import os

import sqlalchemy as sa

from composable import conf
from composable.db import api as dbapi
from composable.db import migration
from tests.functional import fixtures as db_fixtures

CONF = conf.CONF


def test_db_backend_points_everything_at_a_migrated_database(db_backend):
    assert CONF.database.connection == db_backend
    assert str(dbapi.get_engine().url.database) in db_backend
    assert migration.version() == migration.head()
    assert db_fixtures.TestDatabase('sqlite').name.startswith(
        'composable_test_')


def _exists(backend, name):
    engine = db_fixtures._admin_engine(backend)
    try:
        with engine.connect() as conn:
            if backend == 'mysql':
                rows = conn.execute(sa.text(
                    'SELECT schema_name FROM information_schema.schemata '
                    'WHERE schema_name = :n'), {'n': name})
            else:
                rows = conn.execute(sa.text(
                    'SELECT datname FROM pg_database WHERE datname = :n'),
                    {'n': name})
            return rows.first() is not None
    finally:
        engine.dispose()


def test_databases_are_dropped_even_with_open_connections():
    for backend in ('mysql', 'postgresql'):
        db_fixtures.check_server(backend)
        test_db = db_fixtures.TestDatabase(backend)
        with test_db as url:
            assert _exists(backend, test_db.name)
            engine = sa.create_engine(url)
            conn = engine.connect()
            conn.execute(sa.text('SELECT 1'))
        assert not _exists(backend, test_db.name)
        # The server closed it.
        conn.invalidate()
        engine.dispose()


def test_sqlite_database_file_is_removed(tmp_path):
    test_db = db_fixtures.TestDatabase('sqlite', tmpdir=str(tmp_path))
    with test_db as url:
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            conn.execute(sa.text('CREATE TABLE t (x INTEGER)'))
        engine.dispose()
        path = url[len('sqlite:///'):]
        assert os.path.exists(path)
    assert not os.path.exists(path)


def test_conf_is_restored_after_database():
    before = CONF.database.connection
    with db_fixtures.database('sqlite', schema=False) as url:
        assert CONF.database.connection == url
    assert CONF.database.connection == before
