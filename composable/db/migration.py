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

"""Database schema migrations (alembic), run on the oslo.db engine that
``[database]connection`` names.

The migration scripts live in composable/db/migrations/versions; there is
no alembic.ini. To write a new migration, change composable/db/models.py,
then, with [database]connection naming a database at head, let alembic
draft the script::

    from composable.db import migration
    migration.revision('add foo to leases', autogenerate=True)

and review it. tests/functional/db/test_migrations.py fails while models
and migrations disagree.
"""

import os

from alembic import command as alembic_command
from alembic import config as alembic_config
from alembic import migration as alembic_migration
from alembic import script as alembic_script
import sqlalchemy as sa

from composable.common import exception
from composable.db import api as db_api

MIGRATIONS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                              'migrations')
# A table of the initial schema: its presence without an alembic version
# table means the schema was made by hand (or by create_schema_for_tests).
_SENTINEL_TABLE = 'fabrics'


def _config(connection=None):
    config = alembic_config.Config()
    config.set_main_option('script_location', MIGRATIONS_DIR)
    if connection is not None:
        config.attributes['connection'] = connection
    return config


def _script():
    return alembic_script.ScriptDirectory.from_config(_config())


def head():
    """The revision the code expects the database to be at."""
    return _script().get_current_head()


def _version(connection):
    return alembic_migration.MigrationContext.configure(
        connection).get_current_revision()


def version(engine=None):
    """The revision the database is at, or None when it has none."""
    engine = engine or db_api.get_engine()
    with engine.connect() as connection:
        return _version(connection)


def upgrade(revision='head', engine=None):
    """Bring the schema to ``revision`` (default: the latest). Running it
    again at that revision changes nothing."""
    revision = revision or 'head'
    engine = engine or db_api.get_engine()
    with engine.begin() as connection:
        if (_version(connection) is None and
                sa.inspect(connection).has_table(_SENTINEL_TABLE)):
            raise exception.ComposableException(
                'The database has composable tables but no schema version, '
                'so it cannot be upgraded safely. If its schema is that of '
                'revision %(rev)s, record that with "composable-dbsync '
                'stamp %(rev)s" and run the upgrade again.' %
                {'rev': head()})
        alembic_command.upgrade(_config(connection), revision)


def stamp(revision, engine=None):
    """Record ``revision`` as the schema version without running any
    migration."""
    engine = engine or db_api.get_engine()
    with engine.begin() as connection:
        alembic_command.stamp(_config(connection), revision)


def revision(message, autogenerate=False, engine=None):
    """Create a new migration script (development tool)."""
    engine = engine or db_api.get_engine()
    with engine.begin() as connection:
        return alembic_command.revision(_config(connection), message=message,
                                        autogenerate=autogenerate)
