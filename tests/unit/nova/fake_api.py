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

"""A fake composable API (lease, pool, fabric and device GETs; pool and
device lists, the latter filtered by state and pool and paged) behind
wsgi-intercept, counting the requests it gets."""

import collections
import json
import threading
from urllib import parse

from wsgi_intercept import interceptor

ENDPOINT = 'http://composable.example.test:6590'


class FakeComposableAPI(object):

    def __init__(self):
        self.leases = {}
        self.pools = {}
        self.fabrics = {}
        self.devices = {}
        # Devices listed per page.
        self.page_size = 1000
        self.calls = collections.Counter()
        self.fail = None  # an HTTP status to answer every request with
        self.lock = threading.Lock()
        self.headers = []
        # The highest microversion it serves; above it answers 406.
        self.max_version = (1, 4)

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
        if parts in (['v1', 'devices'], ['v1', 'pools']):
            return self._list(start_response, parts[1], dict(
                parse.parse_qsl(environ.get('QUERY_STRING', ''))))
        table = {'leases': self.leases, 'pools': self.pools,
                 'fabrics': self.fabrics}.get(parts[1]) \
            if len(parts) == 3 and parts[0] == 'v1' else None
        if table is None or parts[2] not in table:
            return self._reply(start_response, 404, {'errors': [
                {'status': 404, 'title': 'Not Found'}]})
        return self._reply(start_response, 200, table[parts[2]])

    def _list(self, start_response, collection, query):
        items = sorted((self.devices if collection == 'devices'
                        else self.pools).values(), key=lambda i: i['uuid'])
        for key in ('state', 'pool'):
            if key in query:
                field = 'pool_uuid' if key == 'pool' else key
                items = [i for i in items if i.get(field) == query[key]]
        if 'marker' in query:
            items = [i for i in items if i['uuid'] > query['marker']]
        page = items[:self.page_size]
        links = []
        if len(items) > self.page_size:
            links.append({'rel': 'next', 'href': '%s/v1/%s?%s' % (
                ENDPOINT, collection, parse.urlencode(
                    dict(query, marker=page[-1]['uuid'])))})
        return self._reply(start_response, 200,
                           {collection: page, 'links': links})

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
