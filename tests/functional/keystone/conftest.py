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

"""One real Keystone and one composable-all validating its tokens, for
the whole run of this package (bootstrapping Keystone takes half a
minute on a busy machine). Skipped when Keystone's virtualenv is missing,
failed then when ``COMPOSABLE_REQUIRE_KEYSTONE=1`` (CI)."""

import os

import pytest

from tests.functional.keystone import servers


@pytest.fixture(scope='session')
def keystone_stack(tmp_path_factory):
    venv = servers.keystone_venv()
    if venv is None:
        message = ('Keystone is not installed: run "tox -e keystone" or '
                   'point %s at a virtualenv with keystone' %
                   servers.VENV_VAR)
        if os.environ.get(servers.REQUIRE_VAR) == '1':
            pytest.fail(message)
        pytest.skip(message)
    workdir = tmp_path_factory.mktemp('keystone')
    composable = servers.ComposableAll(workdir)
    keystone = servers.Keystone(workdir, venv, composable.endpoint)
    try:
        keystone.start()
        composable.start(keystone)
        yield keystone, composable
    finally:
        composable.stop()
        keystone.stop()


@pytest.fixture(scope='session')
def keystone(keystone_stack):
    return keystone_stack[0]


@pytest.fixture(scope='session')
def composable(keystone_stack):
    return keystone_stack[1]
