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

"""Real Keystone, real composable-all (auth_strategy = keystone) and real
Horizon with the composable plugin, driven by headless Chromium.

Runs in ``tox -e horizon`` (Horizon, Selenium and the service in one
virtualenv; Keystone in ``tox -e keystone``'s), and is skipped in other
virtualenvs. Skipped where Keystone or Chromium is missing, failed
instead when ``COMPOSABLE_REQUIRE_KEYSTONE=1`` (CI).
Every process is stopped by its fixture, on failure too.
"""

import os
import shutil

import pytest

from tests.functional.keystone import servers

CHROMIUM = os.environ.get('COMPOSABLE_CHROMIUM', '/usr/bin/chromium')
CHROMEDRIVER = os.environ.get('COMPOSABLE_CHROMEDRIVER',
                              '/usr/bin/chromedriver')
SCREENSHOT_VAR = 'COMPOSABLE_SCREENSHOT_DIR'


def _missing(message):
    if os.environ.get(servers.REQUIRE_VAR) == '1':
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _require_pieces():
    for module in ('selenium', 'openstack_dashboard'):
        try:
            __import__(module)
        except ImportError:
            # A matter of the virtualenv, not of the machine: the
            # functional environment has no Horizon (its pins differ).
            pytest.skip('%s is not installed here: these tests run in '
                        '"tox -e horizon"' % module)
    if servers.keystone_venv() is None:
        _missing('Keystone is not installed: run "tox -e keystone" or '
                 'point %s at a virtualenv with keystone' % servers.VENV_VAR)
    for path, package in ((CHROMIUM, 'chromium'),
                          (CHROMEDRIVER, 'chromium-driver')):
        if not os.access(path, os.X_OK):
            _missing('%s is missing: apt-get install %s' % (path, package))


@pytest.fixture(scope='module')
def horizon_stack(tmp_path_factory):
    _require_pieces()
    from tests.functional.horizon import horizon_server
    workdir = tmp_path_factory.mktemp('horizon')
    composable = servers.ComposableAll(workdir)
    keystone = servers.Keystone(workdir, servers.keystone_venv(),
                                composable.endpoint)
    horizon = horizon_server.Horizon(workdir, keystone)
    try:
        horizon.launch()
        keystone.start()
        composable.start(keystone)
        horizon.wait_ready()
        yield keystone, composable, horizon
    finally:
        horizon.stop()
        composable.stop()
        keystone.stop()


@pytest.fixture(scope='module')
def screenshot_dir(tmp_path_factory):
    path = os.environ.get(SCREENSHOT_VAR)
    if path:
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        return path
    return str(tmp_path_factory.mktemp('screenshots'))


@pytest.fixture
def browser(horizon_stack, screenshot_dir, request):
    from tests.functional.horizon import browser as browser_mod
    keystone, composable, horizon = horizon_stack
    driver = browser_mod.Browser(horizon.url, screenshot_dir,
                                 CHROMIUM, CHROMEDRIVER)
    try:
        yield driver
    finally:
        failed = getattr(request.node, 'rep_call', None)
        if failed is not None and failed.failed:
            driver.screenshot('failure-%s' % request.node.name)
        driver.quit()


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # The browser fixture takes a screenshot of a failed test's page.
    outcome = yield
    report = outcome.get_result()
    setattr(item, 'rep_' + report.when, report)
