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

"""composable's SQLite settings apply to composable's engine only."""

import os
import sqlite3

import pytest
import sqlalchemy as sa

from composable.common import context
from composable.db import api as dbapi


def test_write_transactions_take_the_write_lock_first(tmp_path):
    # Composable's transactions start with BEGIN IMMEDIATE: while one is
    # open, even before it writes, no other writer can start (writers
    # queue instead of deadlocking on a SHARED -> RESERVED upgrade).
    path = dbapi.get_engine().url.database
    ctx = context.get_admin_context()
    with dbapi.reader(ctx) as session:
        session.execute(sa.text('SELECT 1'))
        other = sqlite3.connect(path, timeout=0, isolation_level=None)
        with pytest.raises(sqlite3.OperationalError, match='locked'):
            other.execute('BEGIN IMMEDIATE')
        other.close()
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    other.execute('BEGIN IMMEDIATE')
    other.execute('ROLLBACK')
    other.close()


def test_other_engines_in_the_process_keep_their_behaviour(tmp_path):
    dbapi.get_engine()
    engine = sa.create_engine('sqlite:///%s' % os.path.join(tmp_path,
                                                            'other.db'))
    assert dbapi._sqlite_on_begin not in list(engine.dispatch.begin)
    assert dbapi._sqlite_on_connect not in list(
        engine.pool.dispatch.connect)
    # And composable's own engine has them.
    ours = dbapi.get_engine()
    assert list(ours.dispatch.begin)[0] is dbapi._sqlite_on_begin
    assert dbapi._sqlite_on_connect in list(ours.pool.dispatch.connect)
    engine.dispose()
