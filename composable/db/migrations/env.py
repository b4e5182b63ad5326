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

"""Alembic environment of composable.

There is no alembic.ini: composable.db.migration builds the configuration
and hands over an open connection of the oslo.db engine (the one
[database]connection names) in ``config.attributes['connection']``.
"""

from alembic import context

from composable.db import api as db_api
from composable.db import models

config = context.config
target_metadata = models.Base.metadata


def _configure_kwargs(dialect_name):
    # SQLite cannot ALTER most things: later migrations run in batch mode
    # there (copy, rebuild, rename).
    return {'render_as_batch': dialect_name == 'sqlite',
            'compare_type': True}


def run_migrations_offline():
    """Emit the SQL of the migrations instead of running them."""
    url = config.get_main_option('sqlalchemy.url')
    if not url:
        url = str(db_api.get_engine().url)
    dialect_name = url.split(':', 1)[0].split('+', 1)[0]
    context.configure(url=url, target_metadata=target_metadata,
                      literal_binds=True, **_configure_kwargs(dialect_name))
    with context.begin_transaction():
        context.run_migrations()


def _run(connection):
    context.configure(connection=connection,
                      target_metadata=target_metadata,
                      **_configure_kwargs(connection.dialect.name))
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online():
    connection = config.attributes.get('connection')
    if connection is not None:
        _run(connection)
        return
    with db_api.get_engine().begin() as connection:
        _run(connection)


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
