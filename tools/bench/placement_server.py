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

"""A real Placement service for the benchmarks: the openstack-placement
WSGI application (``placement.wsgi.api``) under uWSGI, as deployments run
it, on a database of its own on the benchmark's MariaDB server, with the
``noauth2`` strategy (the token ``admin`` is an admin's).

Every request is logged by uWSGI, one line each, so that a benchmark can
count the calls made to Placement during its run (:meth:`request_count`).
"""

import os
import signal
import subprocess
import time
import uuid

import requests
import sqlalchemy as sa

from tests.functional import leftovers
from tests.functional import stack as stack_mod

# How uWSGI's request log line ends (one per request served).
REQUEST_MARK = b' => generated '


class PlacementServer(object):

    def __init__(self, workdir, db_host='127.0.0.1', processes=1,
                 threads=8):
        self.workdir = workdir
        self.db_host = db_host
        self.processes = processes
        self.threads = threads
        # composable_* databases carrying the run's tag are swept by the
        # leftover check if this process dies before dropping it.
        self.dbname = 'composable_bench_%s_placement_%s' % (
            leftovers.run_tag(), uuid.uuid4().hex[:6])
        self.db_url = 'mysql+pymysql://root@%s/%s?charset=utf8mb4' % (
            db_host, self.dbname)
        self.port = stack_mod.free_port()
        self.endpoint = 'http://127.0.0.1:%d' % self.port
        self.confdir = os.path.join(workdir, 'placement')
        self.log_path = os.path.join(workdir, 'placement.log')
        self.proc = None
        self.engine = None

    def _root(self):
        import pymysql
        return pymysql.connect(host=self.db_host, user='root', password='')

    def _write_config(self):
        os.makedirs(self.confdir, exist_ok=True)
        with open(os.path.join(self.confdir, 'placement.conf'), 'w') as f:
            f.write('[DEFAULT]\ndebug = false\n\n'
                    '[api]\nauth_strategy = noauth2\n\n'
                    '[placement_database]\nconnection = %s\n'
                    'max_pool_size = 20\nmax_overflow = 40\n' % self.db_url)

    def start(self):
        root = self._root()
        try:
            root.cursor().execute('CREATE DATABASE %s CHARACTER SET utf8mb4'
                                  % self.dbname)
        finally:
            root.close()
        self._write_config()
        self.engine = sa.create_engine(self.db_url)
        # The schema from Placement's models, as its own functional
        # fixtures make it: seconds faster than running every migration
        # (placement-manage db sync), and the same tables.
        from placement.db.sqlalchemy import migration
        migration.create_schema(self.engine)
        self.launch()

    def launch(self):
        """Start (or start again) the uWSGI server on the same port."""
        env = dict(os.environ, OS_PLACEMENT_CONFIG_DIR=self.confdir)
        argv = [stack_mod.uwsgi_binary(),
                '--http-socket', '127.0.0.1:%d' % self.port,
                '--add-header', 'Connection: close',
                '--module', 'placement.wsgi.api:application',
                '--master', '--processes', str(self.processes),
                '--threads', str(self.threads),
                '--lazy-apps', '--die-on-term', '--need-app',
                '--procname-prefix', 'placement-bench ']
        out = open(self.log_path, 'ab')
        self.proc = subprocess.Popen(argv, stdout=out,
                                     stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL,
                                     start_new_session=True, env=env)
        out.close()
        deadline = time.time() + 180
        while time.time() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                if requests.get(self.endpoint + '/', timeout=2).ok:
                    return
            except (requests.ConnectionError, requests.Timeout):
                pass
            time.sleep(0.2)
        raise RuntimeError('Placement did not answer on %s; see %s' % (
            self.endpoint, self.log_path))

    def halt(self):
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def stop(self):
        self.halt()
        if self.engine is not None:
            self.engine.dispose()
        root = self._root()
        try:
            root.cursor().execute('DROP DATABASE IF EXISTS %s' % self.dbname)
        finally:
            root.close()

    def request_count(self):
        """Requests served so far (uWSGI's log lines)."""
        try:
            with open(self.log_path, 'rb') as f:
                return f.read().count(REQUEST_MARK)
        except OSError:
            return 0

    def composable_config(self):
        """composable's [placement] options for reaching this server."""
        return {'auth_type': 'admin_token', 'token': 'admin',
                'endpoint': self.endpoint}


def overcommit_problems(engine):
    """Providers of the Placement database at ``engine`` whose allocations
    exceed their capacity, read in one consistent snapshot."""
    problems = []
    with engine.connect() as conn:
        conn = conn.execution_options(isolation_level='REPEATABLE READ')
        with conn.begin():
            rows = conn.execute(sa.text(
                'SELECT rp.uuid, a.resource_class_id, SUM(a.used), '
                '  MAX((i.total - i.reserved) * i.allocation_ratio) '
                'FROM allocations a '
                'JOIN resource_providers rp ON rp.id = a.resource_provider_id '
                'LEFT JOIN inventories i ON '
                '  i.resource_provider_id = a.resource_provider_id AND '
                '  i.resource_class_id = a.resource_class_id '
                'GROUP BY rp.uuid, a.resource_class_id')).all()
    for provider, rc, used, capacity in rows:
        if capacity is None or used > capacity:
            problems.append('Placement provider %s over-committed: class '
                            '%s holds %s of %s' % (provider, rc, used,
                                                   capacity))
    return problems


def allocation_count(engine):
    with engine.connect() as conn:
        return conn.execute(sa.text(
            'SELECT COUNT(DISTINCT consumer_id) FROM allocations')).scalar()
