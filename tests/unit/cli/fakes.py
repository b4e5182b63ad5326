#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""Test plumbing: run ``openstack composable ...`` in-process, and a tiny
scripted HTTP server standing in for the API."""

import contextlib
import io
import json
import logging
import os
import threading
from urllib import parse
from wsgiref import simple_server

from openstackclient.common import clientmanager
from openstackclient import shell


class _QuietHandler(simple_server.WSGIRequestHandler):
    def log_message(self, *args):
        pass


class WSGIServer(object):
    """Serve a WSGI app on 127.0.0.1:<free port> in a daemon thread."""

    def __init__(self, app):
        self.httpd = simple_server.make_server(
            '127.0.0.1', 0, app, server_class=_ThreadingWSGIServer,
            handler_class=_QuietHandler)
        self.url = 'http://127.0.0.1:%d' % self.httpd.server_port
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={'poll_interval': 0.05},
                                       daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


class _ThreadingWSGIServer(simple_server.WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class Request(object):
    def __init__(self, environ):
        self.method = environ['REQUEST_METHOD']
        self.path = environ.get('PATH_INFO', '')
        self.query = dict(parse.parse_qsl(environ.get('QUERY_STRING', '')))
        self.headers = {k[5:].replace('_', '-').lower(): v
                        for k, v in environ.items()
                        if k.startswith('HTTP_')}
        if environ.get('CONTENT_TYPE'):
            self.headers['content-type'] = environ['CONTENT_TYPE']
        length = int(environ.get('CONTENT_LENGTH') or 0)
        raw = environ['wsgi.input'].read(length) if length else b''
        self.body = json.loads(raw) if raw else None


class ScriptedAPI(object):
    """A WSGI app answering from a table of (method, path) -> handler.

    A handler is a (status, body) tuple or a callable taking the Request
    and returning one. Every request is recorded in ``requests``.
    """

    def __init__(self):
        self.routes = {}
        self.requests = []

    def add(self, method, path, handler):
        self.routes[(method, path)] = handler

    def __call__(self, environ, start_response):
        request = Request(environ)
        self.requests.append(request)
        handler = self.routes.get((request.method, request.path))
        if handler is None:
            status, body = 404, error_body(404, 'Not Found',
                                           'No route %s %s' % (
                                               request.method,
                                               request.path))
        elif callable(handler):
            status, body = handler(request)
        else:
            status, body = handler
        headers = [('OpenStack-API-Version', 'composable 1.0')]
        payload = b''
        if body is not None:
            payload = json.dumps(body).encode()
            headers.append(('Content-Type', 'application/json'))
        headers.append(('Content-Length', str(len(payload))))
        reason = {200: 'OK', 201: 'Created', 202: 'Accepted',
                  204: 'No Content'}.get(status, 'Error')
        start_response('%d %s' % (status, reason), headers)
        return [payload]


def error_body(status, title, detail, code='composable.error'):
    return {'errors': [{'status': status, 'code': code, 'title': title,
                        'detail': detail,
                        'request_id': 'req-00000000-test'}]}


def _forget_client():
    # The client manager caches each plugin's client on its class, for the
    # life of the process; every run here must build its own.
    for cls in clientmanager.ClientManager.__mro__:
        cache = vars(cls).get('composable')
        if cache is not None:
            cache._handle = None


@contextlib.contextmanager
def _clean_environment():
    _forget_client()
    saved = {k: v for k, v in os.environ.items() if k.startswith('OS_')}
    for key in saved:
        del os.environ[key]
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
        os.environ.update(saved)
        _forget_client()


def run_openstack(url, *args, api_version=None):
    """Run ``openstack --os-auth-type none --os-endpoint URL composable
    ARGS``; return (exit code, stdout, stderr)."""
    argv = ['--os-auth-type', 'none', '--os-endpoint', url]
    if api_version:
        argv += ['--os-composable-api-version', api_version]
    argv += ['composable'] + list(args)
    out, err = io.StringIO(), io.StringIO()
    with _clean_environment(), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        try:
            code = shell.main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def run_json(url, *args):
    """Like run_openstack with ``-f json``; return the decoded output."""
    code, out, err = run_openstack(url, *(list(args) + ['-f', 'json']))
    if code != 0:
        raise AssertionError('openstack composable %s failed (%s): %s%s'
                             % (' '.join(args), code, err, out))
    return json.loads(out)
