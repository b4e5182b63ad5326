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

"""A fake composable API (lease, pool and fabric GETs) behind
wsgi-intercept, counting the requests it gets."""

import collections
import json
import threading

from wsgi_intercept import interceptor

ENDPOINT = 'http://composable.example.test:6590'


class FakeComposableAPI(object):

    def __init__(self):
        self.leases = {}
        self.pools = {}
        self.fabrics = {}
        self.calls = collections.Counter()
        self.fail = None  # an HTTP status to answer every request with
        self.lock = threading.Lock()
        self.headers = []
        # The highest microversion it serves; above it answers 406.
        self.max_version = (1, 3)

    @property
    def total(self):
        return sum(self.calls.values())

    def __call__(self, environ, start_response):
        path = environ['PATH_INFO']
        with self.lock:
            self.calls[path] += 1
            self.headers.append(environ.get('HTTP_OPENSTACK_API_VERSION'))
        if self.fail:
            return self._reply(start_response, self.fail, {'errors': []})
        asked = (environ.get('HTTP_OPENSTACK_API_VERSION') or
                 'composable 1.0').split()[-1]
        if tuple(int(p) for p in asked.split('.')) > self.max_version:
            return self._reply(start_response, 406, {'errors': [
                {'status': 406, 'title': 'Not Acceptable'}]})
        parts = path.strip('/').split('/')
        table = {'leases': self.leases, 'pools': self.pools,
                 'fabrics': self.fabrics}.get(parts[1]) \
            if len(parts) == 3 and parts[0] == 'v1' else None
        if table is None or parts[2] not in table:
            return self._reply(start_response, 404, {'errors': [
                {'status': 404, 'title': 'Not Found'}]})
        return self._reply(start_response, 200, table[parts[2]])

    @staticmethod
    def _reply(start_response, status, body):
        data = json.dumps(body).encode()
        start_response('%d X' % status,
                       [('Content-Type', 'application/json'),
                        ('Content-Length', str(len(data)))])
        return [data]

    def install(self):
        intercept = interceptor.RequestsInterceptor(lambda: self,
                                                    url=ENDPOINT)
        intercept.install_intercept()
        return intercept
