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

"""composable's MariaDB sessions: READ COMMITTED, and no ROLLBACK sent after
a COMMIT, while a connection returned with a transaction open is still
rolled back."""

import threading

import pymysql.connections
import pytest
import sqlalchemy as sa

from composable.common import context as ctx_mod
from composable.common import states
from composable.conductor.allocator import claims as allocator
from composable.db import api as dbapi
from tests.functional import fixtures as db_fixtures
from tests.unit.conductor.allocator import inventory as inv


@pytest.fixture
def mysql_db():
    with db_fixtures.database('mysql') as url:
        yield url


@pytest.fixture
def sent(monkeypatch):
    """The commands composable's connections send: COMMIT, ROLLBACK, ..."""
    commands = []
    real = pymysql.connections.Connection._execute_command

    def execute_command(self, command, sql):
        text = sql.decode() if isinstance(sql, bytes) else str(sql)
        commands.append(text.split(' ', 1)[0].upper())
        return real(self, command, sql)

    monkeypatch.setattr(pymysql.connections.Connection, '_execute_command',
                        execute_command)
    return commands


def test_read_committed(mysql_db):
    with dbapi.reader(inv.admin()) as session:
        level = session.execute(sa.text(
            'SELECT @@SESSION.tx_isolation')).scalar()
    assert level == 'READ-COMMITTED'


def test_no_rollback_after_commit(mysql_db, sent):
    inv.memory_inventory(nodes=(4096,))
    ctx = ctx_mod.RequestContext(user_id='u', project_id='p1')
    del sent[:]
    uuid, status = allocator.create_and_allocate(
        ctx, {'project_id': 'p1', 'memory_mb': 1024})
    assert status == states.RESERVED
    assert 'COMMIT' in sent
    assert 'ROLLBACK' not in sent
    # A read ends with the ROLLBACK that ends its transaction.
    del sent[:]
    assert dbapi.lease_ref(ctx, uuid).status == states.RESERVED
    assert sent.count('ROLLBACK') == 1


def test_open_transaction_rolled_back_on_return(mysql_db):
    """A connection handed back with a transaction open (outside
    SQLAlchemy's own bookkeeping) is rolled back before anyone else gets
    it: its row locks are released and its writes are gone."""
    inv.memory_inventory(nodes=(4096,))
    engine = dbapi.get_engine()
    raw = engine.raw_connection()
    cursor = raw.cursor()
    cursor.execute("UPDATE pools SET used = 7 WHERE name = 'mem'")
    cursor.execute("SELECT id FROM pools WHERE name = 'mem' FOR UPDATE")
    cursor.close()
    raw.close()
    # Another transaction can lock the pool at once, and sees no change.
    done = threading.Event()

    def lock_pool():
        with engine.begin() as conn:
            conn.execute(sa.text(
                "SELECT id FROM pools WHERE name = 'mem' FOR UPDATE"))
        done.set()

    thread = threading.Thread(target=lock_pool)
    thread.start()
    assert done.wait(10), 'the pool row stayed locked'
    thread.join()
    assert dbapi.pool_get(inv.admin(), 'mem').used == 0
