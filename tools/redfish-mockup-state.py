#!/usr/bin/env python3
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

"""A stateful front for a static Redfish mockup server.

A mockup server (DMTF's redfishMockupServer.py serving a mockup folder)
answers every change with success and changes nothing, so a fabric
driver's bind cannot be tried against it. This proxy forwards reads to
it, answers every GET with an ETag, and applies the fabric changes the
``redfish`` driver's zones mode makes to its own copy of the resources:

* ``PATCH`` of a zone's ``Links.Endpoints`` (``If-Match`` checked; the
  endpoints' ``Links.Zones`` follow);
* ``POST`` to a fabric's ``Connections`` collection and ``DELETE`` of a
  connection (the endpoints' ``Links.Connections`` follow).

Everything else goes to the mockup server as it is, but for queries:
a collection is answered with links only, whatever ``$expand`` asks, so
that a client reads each member (as changed here). Nothing is written to
the mockup folder. Usage::

    python3 tools/redfish-mockup-state.py --upstream http://127.0.0.1:8000 \\
        --port 8001
"""

import argparse
import copy
import hashlib
import http.server
import json
import re
import socketserver
import sys
import threading
import urllib.error
import urllib.request

_ZONE = re.compile(r'^/redfish/v1/Fabrics/[^/]+/Zones/[^/]+$')
_CONNECTIONS = re.compile(r'^/redfish/v1/Fabrics/[^/]+/Connections$')
_CONNECTION = re.compile(r'^/redfish/v1/Fabrics/[^/]+/Connections/[^/]+$')


class State(object):

    def __init__(self, upstream):
        self.upstream = upstream.rstrip('/')
        self.lock = threading.Lock()
        # path -> the resource as changed here (None: deleted).
        self.changed = {}
        self.count = 0

    def fetch(self, path, headers):
        """(status, headers, body bytes) of the mockup server."""
        request = urllib.request.Request(self.upstream + path,
                                         headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, dict(answer.headers), answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def resource(self, path, headers):
        """The resource at ``path`` as this proxy knows it, or None."""
        path = path.rstrip('/')
        if path in self.changed:
            return copy.deepcopy(self.changed[path])
        status, _, body = self.fetch(path, headers)
        if status != 200:
            return None
        try:
            return json.loads(body)
        except ValueError:
            return None

    @staticmethod
    def etag(body):
        text = json.dumps(body, sort_keys=True).encode()
        return '"%s"' % hashlib.sha256(text).hexdigest()[:16]

    def _relink(self, path, prop, uri, add, headers):
        """Add or drop ``uri`` in the Links.<prop> of the resource at
        ``path``."""
        body = self.resource(path, headers)
        if body is None:
            return
        links = body.setdefault('Links', {})
        current = [item for item in links.get(prop, [])
                   if item.get('@odata.id') != uri]
        if add:
            current.append({'@odata.id': uri})
        links[prop] = current
        self.changed[path] = body

    def patch_zone(self, path, body, headers):
        zone = self.resource(path, headers)
        wanted = [item['@odata.id'].rstrip('/')
                  for item in body['Links']['Endpoints']]
        before = [item['@odata.id'].rstrip('/')
                  for item in zone.get('Links', {}).get('Endpoints', [])]
        zone.setdefault('Links', {})['Endpoints'] = [
            {'@odata.id': uri} for uri in wanted]
        self.changed[path] = zone
        for uri in set(before) - set(wanted):
            self._relink(uri, 'Zones', path, False, headers)
        for uri in set(wanted) - set(before):
            self._relink(uri, 'Zones', path, True, headers)

    def post_connection(self, path, body, headers):
        collection = self.resource(path, headers)
        self.count += 1
        uri = '%s/composable-%d' % (path, self.count)
        links = body.get('Links') or {}
        made = {'@odata.type': '#Connection.v1_4_0.Connection',
                '@odata.id': uri, 'Id': uri.rsplit('/', 1)[-1],
                'Name': body.get('Name') or 'Connection',
                'Status': {'State': 'Enabled', 'Health': 'OK'},
                'Links': {
                    'InitiatorEndpoints': links.get('InitiatorEndpoints',
                                                    []),
                    'TargetEndpoints': links.get('TargetEndpoints', [])}}
        self.changed[uri] = made
        collection['Members'] = collection.get('Members', []) + [
            {'@odata.id': uri}]
        collection['Members@odata.count'] = len(collection['Members'])
        self.changed[path] = collection
        for item in (made['Links']['InitiatorEndpoints'] +
                     made['Links']['TargetEndpoints']):
            self._relink(item['@odata.id'], 'Connections', uri, True,
                         headers)
        return uri, made

    def delete_connection(self, path, headers):
        made = self.resource(path, headers)
        parent = path.rsplit('/', 1)[0]
        collection = self.resource(parent, headers)
        collection['Members'] = [m for m in collection.get('Members', [])
                                 if m.get('@odata.id') != path]
        collection['Members@odata.count'] = len(collection['Members'])
        self.changed[parent] = collection
        links = made.get('Links', {})
        for item in (links.get('InitiatorEndpoints', []) +
                     links.get('TargetEndpoints', [])):
            self._relink(item['@odata.id'], 'Connections', path, False,
                         headers)
        self.changed[path] = None


def handler_for(state):

    class Handler(http.server.BaseHTTPRequestHandler):

        protocol_version = 'HTTP/1.1'

        def _headers(self):
            return {k: v for k, v in self.headers.items()
                    if k.lower() in ('x-auth-token', 'authorization',
                                     'content-type')}

        def _send(self, status, body=None, headers=None):
            data = b'' if body is None else json.dumps(body).encode()
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            if body is not None:
                self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status, message):
            self._send(status, {'error': {'code': 'Base.1.18.GeneralError',
                                          'message': message}})

        def _body(self):
            length = int(self.headers.get('Content-Length') or 0)
            raw = self.rfile.read(length) if length else b''
            return json.loads(raw) if raw else None

        def _forward(self, method):
            length = int(self.headers.get('Content-Length') or 0)
            raw = self.rfile.read(length) if length else None
            request = urllib.request.Request(
                state.upstream + self.path, data=raw, method=method,
                headers=self._headers())
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    status, headers, data = (answer.status,
                                             dict(answer.headers),
                                             answer.read())
            except urllib.error.HTTPError as exc:
                status, headers, data = exc.code, dict(exc.headers), \
                    exc.read()
            self.send_response(status)
            for key in ('Location', 'X-Auth-Token', 'Content-Type'):
                if headers.get(key):
                    self.send_header(key, headers[key])
            self.send_header('Content-Length', str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _checked(self, path):
            """The resource, or None once an error was answered."""
            current = state.resource(path, self._headers())
            if current is None:
                self._error(404, 'No resource at %s.' % path)
                return None
            wanted = self.headers.get('If-Match')
            if wanted and wanted not in ('*', state.etag(current)):
                self._error(412, 'The ETag given in If-Match is not '
                                 'current.')
                return None
            return current

        def do_GET(self):
            path = self.path.split('?', 1)[0].rstrip('/') or '/'
            with state.lock:
                if path in state.changed:
                    body = state.changed[path]
                    if body is None:
                        return self._error(404, 'No resource at %s.' %
                                           path)
                    return self._send(200, body,
                                      {'ETag': state.etag(body)})
            # Without the query: members given in full ($expand) would be
            # the mockup's, not the ones changed here.
            status, headers, data = state.fetch(path, self._headers())
            extra = {}
            try:
                extra['ETag'] = state.etag(json.loads(data))
            except ValueError:
                pass
            self.send_response(status)
            for key, value in extra.items():
                self.send_header(key, value)
            if headers.get('Content-Type'):
                self.send_header('Content-Type', headers['Content-Type'])
            self.send_header('Content-Length', str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_PATCH(self):
            path = self.path.rstrip('/')
            if not _ZONE.match(path):
                return self._forward('PATCH')
            with state.lock:
                if self._checked(path) is None:
                    return
                try:
                    state.patch_zone(path, self._body(), self._headers())
                except (TypeError, KeyError, AttributeError, ValueError):
                    return self._error(400, 'The request needs '
                                            'Links.Endpoints.')
                self._send(204)

        def do_POST(self):
            path = self.path.rstrip('/')
            if not _CONNECTIONS.match(path):
                return self._forward('POST')
            with state.lock:
                try:
                    uri, made = state.post_connection(path, self._body(),
                                                      self._headers())
                except (TypeError, KeyError, AttributeError, ValueError):
                    return self._error(400, 'The request needs Links.')
                self._send(201, made, {'Location': uri})

        def do_DELETE(self):
            path = self.path.rstrip('/')
            if not _CONNECTION.match(path):
                return self._forward('DELETE')
            with state.lock:
                if self._checked(path) is None:
                    return
                state.delete_connection(path, self._headers())
                self._send(204)

        def log_message(self, format, *args):
            sys.stderr.write('%s %s\n' % (self.command, self.path))

    return Handler


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--upstream', required=True,
                        help='URL of the mockup server')
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, default=8001)
    args = parser.parse_args(argv)
    server = Server((args.host, args.port), handler_for(State(args.upstream)))
    sys.stdout.write('Stateful front of %s at http://%s:%d\n' % (
        args.upstream, args.host, server.server_address[1]))
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == '__main__':
    sys.exit(main())
