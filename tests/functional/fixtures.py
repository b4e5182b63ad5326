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

"""Throw-away databases for functional tests.

Each test gets a database of its own, with a unique name, on SQLite (a
file in a temporary directory), MariaDB/MySQL or PostgreSQL; it is dropped
when the test ends.

Most tests only need the ``db_backend`` fixture of
tests/functional/conftest.py: it runs the test once per backend, with
``[database]connection`` pointing at a fresh database whose schema the
migrations brought to head, and yields that URL::

    def test_something(db_backend):
        dbapi.fabric_create(ctx, {...})   # goes to the test's database

For more control, use the context managers here, from pytest fixtures or
from ``unittest.TestCase.enterContext``::

    from tests.functional import fixtures as db_fixtures

    with db_fixtures.database('mysql', schema=False) as url:
        ...   # an empty database; CONF and the engine point at it

    # or: a database, without touching CONF
    with db_fixtures.TestDatabase('postgresql') as url:
        ...

Servers (SQLAlchemy URLs of an account that may create databases):

- ``COMPOSABLE_TEST_MYSQL_URL``, default
  ``mysql+pymysql://root@127.0.0.1:3306/``
- ``COMPOSABLE_TEST_POSTGRESQL_URL``, default
  ``postgresql+psycopg2://postgres@127.0.0.1:5432/postgres``

When a server does not answer, its tests are skipped with a message saying
so, unless ``COMPOSABLE_REQUIRE_DBS=1`` (set in CI), which makes them fail.
"""

import contextlib
import os
import shutil
import tempfile
import threading
import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import url as sa_url

from composable import conf
from composable.db import api as db_api
from composable.db import migration
from tests.functional import leftovers

CONF = conf.CONF

BACKENDS = ('sqlite', 'mysql', 'postgresql')

_SERVER_URLS = {
    'mysql': ('COMPOSABLE_TEST_MYSQL_URL',
              'mysql+pymysql://root@127.0.0.1:3306/'),
    'postgresql': ('COMPOSABLE_TEST_POSTGRESQL_URL',
                   'postgresql+psycopg2://postgres@127.0.0.1:5432/postgres'),
}
_CONNECT_TIMEOUT = 5
_NAME_PREFIX = 'composable_test_'

_reachable = {}
_reachable_lock = threading.Lock()


def databases_required():
    """True when missing database servers are a failure (CI)."""
    return os.environ.get('COMPOSABLE_REQUIRE_DBS') == '1'


def server_url(backend):
    """The administrative URL of the server of ``backend``."""
    env, default = _SERVER_URLS[backend]
    return os.environ.get(env) or default


def _admin_engine(backend):
    url = sa_url.make_url(server_url(backend))
    connect_args = {'connect_timeout': _CONNECT_TIMEOUT}
    return sa.create_engine(url, isolation_level='AUTOCOMMIT',
                            poolclass=sa.pool.NullPool,
                            connect_args=connect_args)


def _unavailable(backend, reason):
    env, _ = _SERVER_URLS[backend]
    message = ('%s server at %s is not available (%s). Start it, or point '
               '%s at one; with COMPOSABLE_REQUIRE_DBS=1 this is a failure '
               'instead of a skip.' %
               (backend, _safe_url(server_url(backend)), reason, env))
    if databases_required():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _safe_url(url):
    return sa_url.make_url(url).render_as_string(hide_password=True)


def check_server(backend):
    """Skip (or fail under COMPOSABLE_REQUIRE_DBS=1) when the server of
    ``backend`` does not answer. SQLite is always there."""
    if backend == 'sqlite':
        return
    with _reachable_lock:
        if backend not in _reachable:
            engine = _admin_engine(backend)
            try:
                with engine.connect() as connection:
                    connection.execute(sa.text('SELECT 1'))
                _reachable[backend] = None
            except Exception as exc:
                _reachable[backend] = str(exc).splitlines()[0]
            finally:
                engine.dispose()
        reason = _reachable[backend]
    if reason is not None:
        _unavailable(backend, reason)


class TestDatabase:
    """One uniquely named database; ``create()`` and ``drop()`` it, or use
    it as a context manager yielding its URL. Touches neither CONF nor the
    composable engine."""

    __test__ = False  # not a test class, whatever pytest thinks

    def __init__(self, backend, tmpdir=None):
        if backend not in BACKENDS:
            raise ValueError('unknown backend %r; use one of %s' %
                             (backend, ', '.join(BACKENDS)))
        self.backend = backend
        self.name = '%s%s_%s' % (_NAME_PREFIX, leftovers.run_tag(),
                                 uuid.uuid4().hex[:12])
        self._tmpdir = tmpdir
        self._own_tmpdir = None
        self.url = None

    def create(self):
        check_server(self.backend)
        if self.backend == 'sqlite':
            directory = self._tmpdir
            if directory is None:
                directory = self._own_tmpdir = tempfile.mkdtemp(
                    prefix='composable-db-')
            self.url = 'sqlite:///%s' % os.path.join(directory,
                                                     self.name + '.sqlite')
            return self.url
        engine = _admin_engine(self.backend)
        try:
            with engine.connect() as connection:
                if self.backend == 'mysql':
                    connection.exec_driver_sql(
                        'CREATE DATABASE `%s` CHARACTER SET utf8mb4 '
                        'COLLATE utf8mb4_general_ci' % self.name)
                else:
                    connection.exec_driver_sql(
                        "CREATE DATABASE \"%s\" ENCODING 'UTF8' "
                        "TEMPLATE template0" % self.name)
        finally:
            engine.dispose()
        url = sa_url.make_url(server_url(self.backend)).set(
            database=self.name)
        if self.backend == 'mysql':
            url = url.update_query_dict({'charset': 'utf8mb4'})
        self.url = url.render_as_string(hide_password=False)
        return self.url

    def drop(self):
        """Drop the database, even if connections are still open on it."""
        if self.url is None:
            return
        if self.backend == 'sqlite':
            if self._own_tmpdir:
                shutil.rmtree(self._own_tmpdir, ignore_errors=True)
            else:
                path = self.url[len('sqlite:///'):]
                for suffix in ('', '-journal', '-wal', '-shm'):
                    with contextlib.suppress(OSError):
                        os.unlink(path + suffix)
            self.url = None
            return
        engine = _admin_engine(self.backend)
        try:
            with engine.connect() as connection:
                if self.backend == 'mysql':
                    _kill_mysql_sessions(connection, self.name)
                    connection.exec_driver_sql(
                        'DROP DATABASE IF EXISTS `%s`' % self.name)
                else:
                    connection.exec_driver_sql(
                        'DROP DATABASE IF EXISTS "%s" WITH (FORCE)' %
                        self.name)
        finally:
            engine.dispose()
        self.url = None

    def __enter__(self):
        return self.create()

    def __exit__(self, *exc_info):
        self.drop()


def _kill_mysql_sessions(connection, name):
    ids = connection.execute(sa.text(
        'SELECT id FROM information_schema.processlist '
        'WHERE db = :name AND id <> CONNECTION_ID()'), {'name': name})
    for (session_id,) in ids.fetchall():
        with contextlib.suppress(Exception):
            connection.exec_driver_sql('KILL %d' % int(session_id))


@contextlib.contextmanager
def use_database(url):
    """Point ``[database]connection`` and the composable engine at ``url``
    for the duration of the block."""
    db_api.reset_facade()
    CONF.set_override('connection', url, 'database')
    try:
        yield url
    finally:
        db_api.reset_facade()
        CONF.clear_override('connection', 'database')


@contextlib.contextmanager
def database(backend, schema=True, tmpdir=None):
    """A fresh database on ``backend`` that CONF and the composable engine
    use inside the block; with ``schema`` the migrations bring it to head
    first. Yields the URL; the database is dropped afterwards."""
    test_db = TestDatabase(backend, tmpdir=tmpdir)
    with test_db as url:
        with use_database(url):
            if schema:
                migration.upgrade('head')
            yield url
