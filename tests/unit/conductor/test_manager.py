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

import os
import re
import signal
import subprocess
import sys
import threading
import time

import sqlalchemy as sa
from sqlalchemy import event as sa_event

from composable.common import states
from composable.conductor import manager as conductor_manager
from composable.db import api as db_api
from tests import lease_rows
from tests.unit.conductor import harness as h_mod


def test_restart_drops_the_reservations_of_its_previous_life(harness):
    uuid = harness.create(memory_mb=1024)
    lease = harness.lease(uuid)
    # As left by a conductor of the same name that was killed and came
    # back before its heartbeat expired.
    lease_rows.write(h_mod.admin(), lease.id,
                     {'status': states.BINDING, 'reservation': 'cond-x',
                      'host_id': harness.hosts['compute-0'].id})
    db_api.action_start(h_mod.user_context(), lease.id, 'bind')
    again = conductor_manager.ConductorManager('cond-x')
    again.start()
    try:
        assert harness.lease(uuid).reservation is None
        again.run_periodic_tasks()
        assert again.wait_for_workers(30)
        lease = harness.lease(uuid)
        assert lease.status == states.BOUND, lease.fault
    finally:
        again.stop()


def test_create_lease_refuses_unknown_fields(harness):
    from composable.common import exception
    try:
        harness.create(memory_mb=1024, colour='blue')
    except exception.Invalid as exc:
        assert 'colour' in exc.message
    else:
        raise AssertionError('an unknown field was accepted')
    assert db_api.lease_list(h_mod.admin()) == []


def test_conductor_process_beats_and_stops_on_sigterm(tmp_path):
    url = 'sqlite:///%s' % (tmp_path / 'c.sqlite')
    engine = sa.create_engine(url)
    config = tmp_path / 'c.conf'
    config.write_text('[DEFAULT]\nhost = proc-cond\n'
                      'transport_url = fake:/\n'
                      '[database]\nconnection = %s\n' % url)
    # The schema first, as composable-dbsync would make it.
    from composable.db import models
    models.Base.metadata.create_all(engine)
    proc = subprocess.Popen(
        [sys.executable, '-c',
         'import sys; from composable.cmd.conductor import main; '
         'sys.exit(main())', '--config-file', str(config)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL, env=dict(os.environ))
    try:
        deadline = time.monotonic() + 60
        while True:
            with engine.connect() as conn:
                row = conn.execute(sa.text(
                    'SELECT online FROM conductors WHERE hostname = '
                    "'proc-cond'")).first()
            if row and row[0]:
                break
            assert proc.poll() is None
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    assert code == 0
    with engine.connect() as conn:
        online = conn.execute(sa.text(
            "SELECT online FROM conductors WHERE hostname = 'proc-cond'"
        )).scalar()
    assert not online
    engine.dispose()


# A statement that reads the leases table itself (joined eager loads of
# its pools and host are in the same statement; the selectin loads of
# extents and devices read other tables).
_READS_LEASES = re.compile(r'^\s*SELECT\b.*\bFROM leases\b', re.S | re.I)


class _Costs(object):
    """What the database is asked while it counts: SELECTs of the leases
    table (any thread), and the transactions the counting thread begins
    (the conductor's RPC method, when it is called in that thread)."""

    def __init__(self):
        self.lease_reads = []
        self.transactions = 0
        self._thread = threading.get_ident()
        self._lock = threading.Lock()

    def _statement(self, conn, cursor, statement, *args):
        if _READS_LEASES.match(statement):
            with self._lock:
                self.lease_reads.append(statement)

    def _begin(self, conn):
        if threading.get_ident() == self._thread:
            self.transactions += 1

    def __enter__(self):
        engine = db_api.get_engine()
        sa_event.listen(engine, 'before_cursor_execute', self._statement)
        sa_event.listen(engine, 'begin', self._begin)
        return self

    def __exit__(self, *exc):
        engine = db_api.get_engine()
        sa_event.remove(engine, 'before_cursor_execute', self._statement)
        sa_event.remove(engine, 'begin', self._begin)


def test_a_bind_reads_the_lease_once_under_its_reservation(harness):
    """One bind through the conductor: its identity looked up once, the
    lease read whole once under the reservation, and never again (the
    flow goes on with the row the task read and moved); the RPC method
    reserves and reads in one transaction, and moves the lease and starts
    its action in another."""
    uuid = harness.create(memory_mb=2048)
    host = harness.hosts['compute-0']
    context = h_mod.user_context()
    # Warm whatever is read once per process (the facade, the schema).
    harness.lease(uuid)
    with _Costs() as costs:
        # In this thread, so that its transactions are counted; the flow
        # runs in the conductor's worker as for an RPC call.
        harness.conductor.bind_lease(context, uuid, host.uuid)
        call_transactions = costs.transactions
        harness.idle()
    lease = harness.lease(uuid)
    assert lease.status == states.BOUND, lease.fault
    assert lease.host_id == host.id
    assert harness.actions(uuid)[-1] == ('bind', 'success')
    # lease_ref, host_get, reserve-and-read, transition-and-action.
    assert call_transactions == 4, call_transactions
    # lease_ref (identity) and the task's read under the reservation.
    assert len(costs.lease_reads) == 2, costs.lease_reads


def test_a_bound_lease_attachment_and_status_are_one_commit(
        harness, monkeypatch):
    """The attachment's last write and the lease's move to bound commit
    together: when that commit fails, neither is written, and the bind
    resumed later finds the lease binding and binds it."""
    uuid = harness.create(memory_mb=1024)
    host = harness.hosts['compute-0']
    failed = []
    real = db_api.action_finish

    def action_finish(context, lease_id, action, result, *args, **kwargs):
        if action == 'bind' and result == 'success' and not failed:
            failed.append(lease_id)
            raise RuntimeError('the database went away')
        return real(context, lease_id, action, result, *args, **kwargs)

    monkeypatch.setattr(db_api, 'action_finish', action_finish)
    harness.api.bind_lease(h_mod.user_context(), uuid, host.uuid)
    harness.idle()
    lease = harness.wait(uuid, [states.BINDING, states.BOUND])
    assert failed == [lease.id]
    assert lease.status == states.BINDING
    assert [a.state for a in db_api.attachment_list(
        h_mod.admin(), lease.id)] == [states.ATT_ATTACHING]
    # Nobody works on it: the periodic takeover resumes the bind.
    harness.conductor.run_periodic_tasks()
    lease = harness.wait(uuid, [states.BOUND, states.BIND_FAILED])
    assert lease.status == states.BOUND, lease.fault
    assert [a.state for a in db_api.attachment_list(
        h_mod.admin(), lease.id)] == [states.ATT_ATTACHED]
