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

"""Shared fixtures of the functional tests.

``db_backend``: runs a test once per database backend (``sqlite``,
``mysql``, ``postgresql``) with ``[database]connection`` pointing at a
fresh, uniquely named database whose schema the migrations brought to
head, and yields its URL. The database is dropped after the test.
A backend whose server does not answer is skipped, or fails when
``COMPOSABLE_REQUIRE_DBS=1``. See tests/functional/fixtures.py for the
building blocks and the environment variables that pick the servers.

``libvirt_conn``: a connection to the system libvirtd (started if need
be), for the modules that run guests.

``nothing_left_behind`` (every test, once for the run): whatever the run
made outside its process and did not remove (see tests/functional/
leftovers.py) fails the run, and is removed. A run stopped by SIGTERM
(``timeout``, a CI that gives up) is interrupted as by Ctrl-C, so the
fixtures still clean up.
"""

import os
import signal
import threading

import pytest

from tests.functional import fixtures as db_fixtures
from tests.functional import leftovers


def _interrupt(signum, frame):
    raise KeyboardInterrupt('stopped by signal %d' % signum)


def pytest_configure(config):
    tag = leftovers.tag_this_run()
    worker = getattr(config, 'workerinput', {}).get('workerid')
    if worker and not tag.endswith(worker):
        # Each worker of a pytest-xdist run is a run of its own to the
        # leftover check: it sweeps only what carries its own tag (letters
        # and digits only: the tag is part of database names).
        os.environ[leftovers.TAG_VAR] = tag + worker
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)


@pytest.fixture(scope='session', autouse=True)
def nothing_left_behind(tmp_path_factory):
    before = leftovers.snapshot()
    yield
    left = leftovers.find(before,
                          mount_roots=[tmp_path_factory.getbasetemp()])
    if left:
        leftovers.clean(left)
        pytest.fail('the functional tests left these behind (removed '
                    'now):\n%s' % leftovers.describe(left), pytrace=False)


@pytest.fixture(params=db_fixtures.BACKENDS)
def db_backend(request, tmp_path):
    with db_fixtures.database(request.param, tmpdir=str(tmp_path)) as url:
        yield url


@pytest.fixture(scope='module')
def libvirt_conn():
    from tests.functional.compute_node import dataplane
    conn = dataplane.libvirt_connection()
    yield conn
    try:
        conn.close()
    except Exception:
        pass
