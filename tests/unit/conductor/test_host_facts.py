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

"""What a compute agent reports of its machine (report_host_facts): the
DMI UUID is kept in the host's properties, through the real RPC cast;
what is not a usable UUID, or comes from an unknown host, changes
nothing."""

import time

import pytest

from composable.conductor import host_facts
from composable.db import api as db_api
from tests.unit.conductor import harness as h_mod

UUID = '4c4c4544-0042-3510-8052-b4c04f4e3432'


def _properties(name):
    return db_api.host_get(h_mod.admin(), name).properties or {}


def test_the_reported_dmi_uuid_is_kept(harness):
    harness.api.report_host_facts(h_mod.admin(), 'compute-0',
                                  {'dmi_uuid': UUID.upper() + '\n'})
    deadline = time.monotonic() + 30
    while _properties('compute-0').get('dmi_uuid') != UUID:
        assert time.monotonic() < deadline, _properties('compute-0')
        time.sleep(0.05)
    # The same report again changes nothing; another host is untouched.
    assert not host_facts.record(h_mod.admin(), 'compute-0',
                                 {'dmi_uuid': UUID})
    assert 'dmi_uuid' not in _properties('compute-1')


@pytest.mark.parametrize('facts', [
    {'dmi_uuid': None}, {'dmi_uuid': ''}, {'dmi_uuid': 'not-a-uuid'},
    {'dmi_uuid': '00000000-0000-0000-0000-000000000000'},
    {'dmi_uuid': 'FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF'},
    {'dmi_uuid': 7}, {}, None])
def test_what_is_no_usable_uuid_changes_nothing(harness, facts):
    ctx = h_mod.admin()
    host = db_api.host_get(ctx, 'compute-0')
    db_api.host_update(ctx, host.uuid, {'properties': {'dmi_uuid': UUID,
                                                       'rack': 'r1'}})
    assert not host_facts.record(ctx, 'compute-0', facts)
    assert _properties('compute-0') == {'dmi_uuid': UUID, 'rack': 'r1'}


def test_other_properties_are_kept(harness):
    ctx = h_mod.admin()
    host = db_api.host_get(ctx, 'compute-0')
    db_api.host_update(ctx, host.uuid, {'properties': {'rack': 'r1'}})
    assert host_facts.record(ctx, 'compute-0', {'dmi_uuid': UUID})
    assert _properties('compute-0') == {'dmi_uuid': UUID, 'rack': 'r1'}


def test_an_unknown_host_is_ignored(harness):
    assert not host_facts.record(h_mod.admin(), 'node-x',
                                 {'dmi_uuid': UUID})
