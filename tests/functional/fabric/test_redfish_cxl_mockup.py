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

"""The cxl driver's redfish back end reading one of DMTF's CXL mockups
(optional).

DMTF publishes mockups of CXL fabric managers in the ``mockups`` folder
of its Redfish-Publications repository (public-cxl,
public-cxl-multiswitch); they are not part of this project. To run this
test, point ``COMPOSABLE_REDFISH_CXL_MOCKUP`` at such a folder (the one
holding the service root's index.json); the test serves its files
read-only itself::

    COMPOSABLE_REDFISH_CXL_MOCKUP=.../mockups/public-cxl \\
        pytest tests/functional/fabric/test_redfish_cxl_mockup.py

or, to read it through DMTF's own server (Redfish-Mockup-Server, run
apart), point ``COMPOSABLE_REDFISH_CXL_MOCKUP_URL`` at that server::

    python3 redfishMockupServer.py -S -D .../mockups/public-cxl -p 8000
    COMPOSABLE_REDFISH_CXL_MOCKUP_URL=http://127.0.0.1:8000 \\
        pytest tests/functional/fabric/test_redfish_cxl_mockup.py
"""

import json
import os
import threading
from wsgiref import simple_server

import pytest

from composable.fabric import cxl
from tests.functional.fabric import root_reads as reads

MOCKUP = os.environ.get('COMPOSABLE_REDFISH_CXL_MOCKUP')
SERVED = os.environ.get('COMPOSABLE_REDFISH_CXL_MOCKUP_URL')

pytestmark = pytest.mark.skipif(
    not SERVED and (not MOCKUP or not os.path.isfile(
        os.path.join(MOCKUP or '.', 'index.json'))),
    reason='set COMPOSABLE_REDFISH_CXL_MOCKUP to a folder of DMTF\'s CXL '
           'mockups (e.g. Redfish-Publications/mockups/public-cxl), or '
           'COMPOSABLE_REDFISH_CXL_MOCKUP_URL to a server of one')


class _Quiet(simple_server.WSGIRequestHandler):
    def log_message(self, format, *args):
        pass


def _app(environ, start_response):
    """The mockup's files, as a static mockup server gives them; any
    login is taken."""
    path = environ.get('PATH_INFO') or '/'
    method = environ['REQUEST_METHOD']
    rel = path.rstrip('/')[len('/redfish/v1'):].strip('/')
    if method == 'POST' and rel == 'SessionService/Sessions':
        start_response('201 Created', [
            ('X-Auth-Token', 'mockup-token'),
            ('Location', '/redfish/v1/SessionService/Sessions/1'),
            ('Content-Type', 'application/json')])
        return [b'{"@odata.id": "/redfish/v1/SessionService/Sessions/1"}']
    if method == 'DELETE' and rel.startswith('SessionService/Sessions'):
        start_response('204 No Content', [])
        return [b'']
    name = os.path.normpath(os.path.join(MOCKUP, rel, 'index.json'))
    if (method != 'GET' or not path.startswith('/redfish/v1') or
            not name.startswith(os.path.normpath(MOCKUP)) or
            not os.path.isfile(name)):
        start_response('404 Not Found', [('Content-Type',
                                          'application/json')])
        return [b'{"error": {"message": "not in the mockup"}}']
    with open(name, 'rb') as f:
        data = f.read()
    start_response('200 OK', [('Content-Type', 'application/json')])
    return [data]


@pytest.fixture
def mockup():
    if SERVED:
        yield SERVED.rstrip('/')
        return
    server = simple_server.make_server('127.0.0.1', 0, _app,
                                       handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever,
                              kwargs={'poll_interval': 0.05}, daemon=True)
    thread.start()
    try:
        yield 'http://127.0.0.1:%d' % server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_memory_devices_of_the_mockup(mockup, capsys, root_reads):
    driver = cxl.CxlFabricDriver()
    fabric = {'name': 'mockup', 'driver_info': {
        'backend': 'redfish', 'address': mockup, 'username': 'mockup',
        'password': 'mockup', 'timeout': 30, 'poll_interval': 0.05}}
    found = driver.discover_memory(fabric)
    reads.assert_once_per_connection(root_reads)
    with capsys.disabled():
        print('\n' + json.dumps(found, indent=1, sort_keys=True))
    assert found, 'the mockup shows no memory domain a target endpoint ' \
                  'leads to'
    for device in found:
        assert device['capacity_mb'] >= 0 and device['free_chunks'] >= 0
        assert device['capacity_mb'] % 256 == 0
    # The mockups give each logical device a GCXLID: the host's serial.
    assert any(d['serial'] for d in found)
    # And zones joining host ports with the devices.
    assert any(d['hosts'] for d in found)
    # A chunk the mockup shows connected to a host is nobody's to lend:
    # no device offers more than its domain holds beyond such chunks.
    for device in found:
        assert device['free_mb'] <= device['capacity_mb'] + 255
