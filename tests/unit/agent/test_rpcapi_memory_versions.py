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

"""The versions the conductor's agent client asks for memory calls: a
partial attach or detach (an elastic virtio-mem lease resizing) needs
1.4, says so by the version alone, and leaves every other call as it
was."""

from unittest import mock

import pytest

from composable.agent import rpcapi

LEASE = {'uuid': 'lease-1'}
EXTENTS = [{'uuid': 'e1', 'medium': 'cxl'}]


@pytest.fixture
def api():
    client = mock.Mock()
    with mock.patch.object(rpcapi.rpc, 'get_client', return_value=client):
        yield rpcapi.AgentAPI(), client


@pytest.mark.parametrize('method', ['attach_memory', 'detach_memory'])
@pytest.mark.parametrize('mode, partial, version', [
    ('virtio-mem', True, '1.4'),
    ('virtio-mem', False, '1.3'),
    ('host', False, None),
])
def test_memory_call_versions(api, method, mode, partial, version):
    agent, client = api
    kwargs = {'partial': True} if partial else {}
    getattr(agent, method)('ctx', 'node-1', LEASE, EXTENTS, mode, 'inst-1',
                           **kwargs)
    [prepare] = client.prepare.call_args_list
    assert prepare.kwargs.get('version') == version
    assert prepare.kwargs['server'] == 'node-1'
    call = client.prepare.return_value.call
    call.assert_called_once_with('ctx', method, lease=LEASE,
                                 extents=EXTENTS, mode=mode,
                                 instance_uuid='inst-1')
