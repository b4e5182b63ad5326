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

"""One real cloud (tests/heat_functional/cloud.py) for the whole run: it
takes a few minutes to start on a busy machine.

Keystone's virtualenv (``tox -e keystone``), MariaDB and RabbitMQ are
required: without them the tests are skipped, or fail when
``COMPOSABLE_REQUIRE_KEYSTONE=1`` / ``COMPOSABLE_REQUIRE_DBS=1`` (CI).
As in tests/functional, whatever the run leaves outside its process
fails the run and is removed, and SIGTERM interrupts the run like Ctrl-C
so that the fixtures still stop what they started.
"""

import os
import signal
import socket
import threading

import pytest

from tests.functional.keystone import servers
from tests.functional import leftovers
from tests.heat_functional import cloud as cloud_mod


def _interrupt(signum, frame):
    raise KeyboardInterrupt('stopped by signal %d' % signum)


def pytest_configure(config):
    leftovers.tag_this_run()
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
        pytest.fail('the Heat tests left these behind (removed now):\n%s'
                    % leftovers.describe(left), pytrace=False)


def _missing(what, require_var):
    message = '%s is required by the Heat tests' % what
    if os.environ.get(require_var) == '1':
        pytest.fail(message)
    pytest.skip(message)


def _answers(port):
    try:
        socket.create_connection(('127.0.0.1', port), timeout=5).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope='session')
def cloud(tmp_path_factory, nothing_left_behind):
    venv = servers.keystone_venv()
    if venv is None:
        _missing('Keystone (run "tox -e keystone" or set %s)'
                 % servers.VENV_VAR, servers.REQUIRE_VAR)
    if not _answers(3306):
        _missing('MariaDB on 127.0.0.1:3306', 'COMPOSABLE_REQUIRE_DBS')
    if not _answers(5672):
        _missing('RabbitMQ on 127.0.0.1:5672', 'COMPOSABLE_REQUIRE_DBS')
    the_cloud = cloud_mod.Cloud(tmp_path_factory.mktemp('cloud'), venv)
    try:
        try:
            the_cloud.start()
        except Exception as exc:
            pytest.fail('the cloud did not start: %s\n%s' % (
                exc, the_cloud.logs()), pytrace=False)
        yield the_cloud
    finally:
        the_cloud.stop()
