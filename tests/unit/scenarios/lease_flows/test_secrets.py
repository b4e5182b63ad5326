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

"""CHAP secrets are stored for the bind and never logged, nor put in
faults or lease actions."""

import logging

from composable.common import states
from composable.db import api as db_api
from tests.unit.conductor import harness as h_mod


def test_chap_secret_never_logged(harness, caplog):
    caplog.set_level(logging.DEBUG)
    uuid = harness.create(memory_mb=2048)
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           harness.hosts['compute-0'].uuid)
    lease = harness.wait(uuid, states.BOUND)
    secrets = [e.chap_secret for e in lease.extents]
    usernames = [e.chap_username for e in lease.extents]
    assert all(secrets) and all(usernames)
    harness.api.unbind_lease(h_mod.user_context(), uuid)
    harness.wait(uuid, states.RESERVED)
    harness.api.delete_lease(h_mod.user_context(), uuid)
    harness.wait(uuid, states.RELEASED)
    # Something was logged at all (the capture works) ...
    assert 'noop exporter: nothing is exported' in caplog.text
    # ... but no secret.
    for secret in secrets:
        assert secret not in caplog.text
        for record in caplog.records:
            assert secret not in str(record.args)
    for action in db_api.action_list(h_mod.admin(), lease.id):
        for secret in secrets:
            assert secret not in (action.message or '')


def test_chap_secret_not_in_fault_of_failed_bind(harness, caplog):
    caplog.set_level(logging.DEBUG)
    # compute-1 has no agent: the exports succeed, the attach times out.
    uuid = harness.create(memory_mb=1024)
    seen = []
    original = harness.agents['memory-0'].exporter.export

    def spy(extent, initiator, username, secret):
        seen.append(secret)
        return original(extent, initiator, username, secret)

    harness.agents['memory-0'].exporter.export = spy
    harness.agents['memory-1'].exporter.export = spy
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           harness.hosts['compute-1'].uuid)
    lease = harness.wait(uuid, states.BIND_FAILED)
    assert seen
    for secret in seen:
        assert secret not in lease.fault
        assert secret not in caplog.text
