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
import signal
import subprocess
import sys
import time

import sqlalchemy as sa

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
