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

"""The migrations against SQLite, MariaDB and PostgreSQL.

- The schema the migrations build is exactly the one the models declare
  (oslo.db's ModelsMigrationsSync: an alembic autogenerate comparison that
  must find no difference).
- Upgrading an empty database to head works, and a second upgrade is a
  no-op that runs no DDL.
- composable-dbsync and composable-status work end to end in a
  subprocess.
"""

import json
import os
import subprocess
import sys
import unittest
from unittest import mock

from oslo_db.sqlalchemy import provision
from oslo_db.sqlalchemy import test_migrations
import pytest
import sqlalchemy as sa

from composable.common import context as composable_context
from composable.common import exception
from composable.db import api as db_api
from composable.db import migration
from composable.db import models
from tests.functional import fixtures as db_fixtures

_DDL = ('CREATE', 'ALTER', 'DROP', 'RENAME')


class _ModelsMigrationsSync(test_migrations.ModelsMigrationsSync):

    backend = None

    def setUp(self):
        super().setUp()
        self.url = self.enterContext(
            db_fixtures.database(self.backend, schema=False))
        # The whole database is dropped after the test: no need for the
        # object-by-object clean-up of oslo.db, which on SQLite would wait
        # for its own open transaction.
        self.enterContext(mock.patch.object(provision.Backend,
                                            'drop_all_objects'))

    def get_engine(self):
        return db_api.get_engine()

    def get_metadata(self):
        return models.Base.metadata

    def db_sync(self, engine):
        migration.upgrade('head', engine=engine)


class TestModelsMigrationsSyncSQLite(_ModelsMigrationsSync,
                                     unittest.TestCase):
    backend = 'sqlite'


class TestModelsMigrationsSyncMySQL(_ModelsMigrationsSync,
                                    unittest.TestCase):
    backend = 'mysql'


class TestModelsMigrationsSyncPostgreSQL(_ModelsMigrationsSync,
                                         unittest.TestCase):
    backend = 'postgresql'


@pytest.fixture(params=db_fixtures.BACKENDS)
def empty_db(request, tmp_path):
    with db_fixtures.database(request.param, schema=False,
                              tmpdir=str(tmp_path)) as url:
        yield url


def _tables(engine):
    return set(sa.inspect(engine).get_table_names())


def _record_ddl(engine):
    statements = []

    @sa.event.listens_for(engine, 'before_cursor_execute')
    def record(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith(_DDL):
            statements.append(statement)

    return statements


def test_upgrade_from_empty_twice(empty_db):
    engine = db_api.get_engine()
    assert migration.version() is None
    assert _tables(engine) == set()

    migration.upgrade('head')
    assert migration.version() == migration.head()
    expected = set(models.Base.metadata.tables) | {'alembic_version'}
    assert _tables(engine) == expected

    ddl = _record_ddl(engine)
    migration.upgrade('head')
    assert ddl == []
    assert migration.version() == migration.head()
    assert _tables(engine) == expected


def test_mysql_tables_are_innodb_utf8mb4():
    with db_fixtures.database('mysql') as url:
        name = sa.engine.make_url(url).database
        with db_api.get_engine().connect() as conn:
            rows = conn.execute(sa.text(
                'SELECT table_name, engine, table_collation '
                'FROM information_schema.tables '
                'WHERE table_schema = :db'), {'db': name}).fetchall()
    tables = {row[0]: (row[1], row[2]) for row in rows}
    assert set(models.Base.metadata.tables) <= set(tables)
    for table in models.Base.metadata.tables:
        engine, collation = tables[table]
        assert engine == 'InnoDB', table
        assert collation.startswith('utf8mb4'), table


def test_stamp_then_upgrade_is_a_no_op(empty_db):
    db_api.create_schema_for_tests()
    # Tables without a version: refused, with the way out in the message.
    with pytest.raises(exception.ComposableException) as info:
        migration.upgrade('head')
    assert 'stamp' in info.value.message
    migration.stamp(migration.head())
    assert migration.version() == migration.head()
    ddl = _record_ddl(db_api.get_engine())
    migration.upgrade('head')
    assert ddl == []


def _run(*args, config_file):
    # Options set in the environment (OS_<GROUP>__<OPTION>) would win over
    # the test's configuration file.
    env = {key: value for key, value in os.environ.items()
           if not (key.startswith('OS_') and '__' in key)}
    return subprocess.run(
        [sys.executable, '-m'] + list(args[:1]) +
        ['--config-file', config_file] + list(args[1:]),
        capture_output=True, text=True, env=env, timeout=120,
        cwd=os.path.dirname(config_file))


def _status(config_file):
    result = _run('composable.cmd.status', 'upgrade', 'check', '--json',
                  config_file=config_file)
    assert result.returncode in (0, 1, 2), result.stderr
    output = json.loads(result.stdout)
    return result.returncode, {c['check']: c for c in output['checks']}


def test_dbsync_and_status_cli_on_sqlite(tmp_path):
    db_path = tmp_path / 'cli.sqlite'
    config = tmp_path / 'composable.conf'
    config.write_text('[database]\nconnection = sqlite:///%s\n'
                      '[fabric]\nenabled_drivers = fake\n' % db_path)
    config = str(config)
    dbsync = 'composable.cmd.dbsync'

    result = _run(dbsync, 'version', config_file=config)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == 'None'

    code, checks = _status(config)
    assert code == 2
    assert checks['Database schema']['result'] == 2
    assert 'composable-dbsync upgrade' in checks['Database schema']['details']

    for _ in range(2):
        result = _run(dbsync, 'upgrade', config_file=config)
        assert result.returncode == 0, result.stderr
    result = _run(dbsync, 'version', config_file=config)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == migration.head()

    code, checks = _status(config)
    assert code == 0, checks
    assert {c['result'] for c in checks.values()} == {0}

    # A fabric on a driver that is not enabled fails the check.
    engine = sa.create_engine('sqlite:///%s' % db_path)
    with engine.begin() as conn:
        conn.execute(models.Fabric.__table__.insert().values(
            uuid='5b5e6a8e-2c4e-4a53-9d7e-3a0c1a0d9f10', name='rack1',
            driver='redfish', driver_info='{}'))
    engine.dispose()
    code, checks = _status(config)
    assert code == 2
    assert checks['Database schema']['result'] == 0
    assert checks['Fabric drivers']['result'] == 2
    assert 'rack1 (driver redfish)' in checks['Fabric drivers']['details']

    result = _run(dbsync, 'stamp', 'no-such-revision', config_file=config)
    assert result.returncode == 1
    assert 'no-such-revision' in result.stderr

    result = _run(dbsync, 'stamp', migration.head(), config_file=config)
    assert result.returncode == 0, result.stderr


DEVICE_FACTS_REVISION = '7c4e1f2a9d60'


def test_device_facts_migration_keeps_devices_reaching_every_host(empty_db):
    """Devices existing before the revision that stores what the fabric
    says of them come out of it with nothing reported: NULL serial and
    health, and NULL reachable hosts (every host), never JSON "null"."""
    before = migration._script().get_revision(
        DEVICE_FACTS_REVISION).down_revision
    migration.upgrade(before)
    engine = db_api.get_engine()
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO fabrics (id, uuid, name, driver) VALUES "
            "(1, 'f0000000-0000-4000-8000-000000000001', 'fab', 'fake')"))
        conn.execute(sa.text(
            "INSERT INTO pools (id, uuid, name, kind, resource_class, "
            "fabric_id, total, reserved, used, step_size) VALUES "
            "(1, 'f0000000-0000-4000-8000-000000000002', 'gpu', 'gpu', "
            "'CUSTOM_COMPOSABLE_GPU', 1, 1, 0, 0, 1)"))
        conn.execute(sa.text(
            "INSERT INTO devices (id, uuid, pool_id, address, kind, state) "
            "VALUES (1, 'f0000000-0000-4000-8000-000000000003', 1, 'slot-1', "
            "'gpu', 'available')"))
    migration.upgrade(DEVICE_FACTS_REVISION)
    with engine.connect() as conn:
        row = conn.execute(sa.text(
            'SELECT serial, health, health_reason, reachable_hosts, state '
            'FROM devices')).one()
    assert tuple(row) == (None, None, None, None, 'available')
    migration.upgrade('head')
    device = db_api.device_get(composable_context.get_admin_context(),
                               'f0000000-0000-4000-8000-000000000003')
    assert device.reachable_hosts is None
