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

"""Fuzz the live API against its OpenAPI document (``tox -e fuzz``).

Starts the standalone service (``composable-all``: SQLite, in-process
messaging, the demo inventory) on a free port of 127.0.0.1 with a state
directory of its own, runs schemathesis against
``composable/api/openapi.yaml`` -- every check (no 5xx, status codes,
headers and bodies as documented), then the stateful run that follows the
document's links to make the objects other operations need -- and stops
the service whatever happens. Schemathesis generates valid data and
invalid data (its negative mode: wrong types, values out of range,
missing and unknown fields), which must be refused with a 4xx. Then
hand-made probes of what schemathesis does not generate are sent to
every operation that takes a body: integral floats in each integer
field, a lone surrogate in each string field, NaN, bodies that are not
UTF-8, too deep or too large (plain and chunked), wrong content types
and charsets, and URLs that are not UTF-8 or hold control characters;
each must get the documented 4xx in the API's error format, without
echoing what was sent. The run fails when schemathesis or a probe finds
anything, or when the service logged a traceback.

Usage: tools/fuzz-api.py [--examples 10] [--keep] [SCHEMATHESIS ARGS...]
"""

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
DOCUMENT = os.path.join(HERE, os.pardir, 'composable', 'api', 'openapi.yaml')
BIN = os.path.dirname(sys.executable)


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def write_config(workdir, port):
    path = os.path.join(workdir, 'composable.conf')
    with open(path, 'w') as f:
        f.write('[DEFAULT]\nlog_file = %s\n\n'
                '[database]\nconnection = sqlite:///%s\n\n'
                '[api]\nhost_ip = 127.0.0.1\nport = %d\n' % (
                    os.path.join(workdir, 'composable-all.log'),
                    os.path.join(workdir, 'composable.sqlite'), port))
    return path


def wait_http(url, proc, timeout=180):
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError('composable-all exited with %s' %
                               proc.returncode)
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError('composable-all did not answer on %s '
                                   'within %d s' % (url, timeout))
            time.sleep(0.5)


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=60)


def tracebacks(log_path):
    if not os.path.exists(log_path):
        return []
    with open(log_path, errors='replace') as f:
        lines = f.read().splitlines()
    return [i for i, line in enumerate(lines) if 'Traceback' in line]


def report_tracebacks(workdir):
    """The number of tracebacks in the service's log and on its output
    (where the WSGI server prints its own); the first is printed."""
    total = 0
    for name in ('composable-all.log', 'stdout.log'):
        path = os.path.join(workdir, name)
        found = tracebacks(path)
        if found and not total:
            with open(path, errors='replace') as f:
                lines = f.read().splitlines()
            print('fuzz: %s holds %d traceback(s); the first:' % (
                name, len(found)))
            print('\n'.join(lines[max(0, found[0] - 2):found[0] + 30]))
        total += len(found)
    return total


def schemathesis(base_url, args, extra):
    command = [os.path.join(BIN, 'schemathesis'), 'run', DOCUMENT,
               '--base-url', base_url,
               '--checks', 'all',
               # The standalone service runs with noauth: the document's
               # Keystone requirement is not enforced there on purpose.
               # Invalid data must be refused without a 5xx and with a
               # documented status (the other checks), but
               # negative_data_rejection also calls invalid what the API
               # accepts on purpose: headers it does not know, and the
               # boolean spellings of oslo (all_projects=0). The probes
               # below check the refusals of what matters.
               '--exclude-checks', 'ignored_auth,negative_data_rejection',
               '--hypothesis-max-examples', str(args.examples),
               '--hypothesis-derandomize',
               '--hypothesis-suppress-health-check', 'all',
               '--stateful', 'links',
               # Valid and invalid data; invalid data must get one of
               # these (anything else, 5xx included, is a failure).
               '--data-generation-method', 'all',
               '--request-timeout', '60000',
               '--header', 'OpenStack-API-Version: composable 1.0',
               '--header', 'X-Project-Id: fuzz',
               '--header', 'X-Roles: admin,member,reader',
               '--no-color'] + extra
    print('fuzz: %s' % ' '.join(command), flush=True)
    return subprocess.call(command)


# -------------------------------------------------------------- probes

PROBE_HEADERS = {'OpenStack-API-Version': 'composable 1.3',
                 'X-Project-Id': 'fuzz',
                 'X-Roles': 'admin,member,reader'}
# A probe's answer is short whatever it sent.
MAX_ERROR_BYTES = 2048


def _resolve(doc, schema):
    while isinstance(schema, dict) and '$ref' in schema:
        node = doc
        for part in schema['$ref'][2:].split('/'):
            node = node[part]
        schema = node
    return schema


def _body_operations(doc):
    """(method, path with its placeholders filled, request schema) of
    every operation that takes a JSON body."""
    for path, item in doc['paths'].items():
        for method, operation in item.items():
            if method not in ('post', 'patch', 'put'):
                continue
            content = (operation.get('requestBody') or {}).get('content')
            if not content:
                continue
            schema = _resolve(doc, content['application/json']['schema'])
            yield (method.upper(),
                   re.sub(r'\{[^}]+\}', 'no-such-thing', path), schema)


def _fields(doc, schema, prefix=()):
    """(path of keys, field schema) of every field, nested objects
    included."""
    for name, sub in (schema.get('properties') or {}).items():
        sub = _resolve(doc, sub)
        yield prefix + (name,), sub
        if sub.get('type') == 'object' and sub.get('properties'):
            for item in _fields(doc, sub, prefix + (name,)):
                yield item


def _with(base, keys, raw_value):
    """The JSON text of ``base`` with the field at ``keys`` set to the
    JSON text ``raw_value`` (which json.dumps cannot produce: 1024.0
    survives, "\ud800" stays an escape)."""
    marker = '"@@probe@@"'
    body = json.loads(json.dumps(base))
    node = body
    for key in keys[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[keys[-1]] = '@@probe@@'
    return json.dumps(body).replace(marker, raw_value).encode('utf-8')


def probes(doc):
    """(label, method, path, headers, body, accepted statuses)."""
    json_type = {'Content-Type': 'application/json'}
    for method, path, schema in _body_operations(doc):
        base = schema.get('example') or {}
        where = '%s %s' % (method, path)
        for keys, field in _fields(doc, schema):
            types = field.get('type')
            types = types if isinstance(types, list) else [types]
            name = '/'.join(keys)
            if 'integer' in types:
                value = field.get('minimum', 1) or 1
                yield ('%s: %s = %d.0' % (where, name, value), method, path,
                       json_type, _with(base, keys, '%d.0' % value), {400})
            if 'number' in types:
                yield ('%s: %s = NaN' % (where, name), method, path,
                       json_type, _with(base, keys, 'NaN'), {400})
            if 'string' in types:
                yield ('%s: %s = lone surrogate' % (where, name), method,
                       path, json_type, _with(base, keys, '"a\\ud800"'),
                       {400})
                yield ('%s: %s = 1 M characters' % (where, name), method,
                       path, json_type,
                       _with(base, keys, '"%s"' % ('x' * 2 ** 17)), {400})
        yield ('%s: not UTF-8' % where, method, path, json_type,
               b'{"name": "caf\xe9"}', {400})
        yield ('%s: 100000 levels deep' % where, method, path, json_type,
               b'[' * 100000 + b']' * 100000, {400})
        yield ('%s: 1 MiB body' % where, method, path, json_type,
               b'{"name": "%s"}' % (b'x' * 2 ** 20), {413})
        for content_type, body in (
                ('text/plain', b'{}'),
                ('application/javascript', b'{"a": "\xff"}'),
                ('application/json; charset=latin-1', b'{"a": "\xe9"}'),
                ('application/json; charset=no-such-charset', b'{}'),
                ('multipart/form-data', b'--x--'),
                ('application/x-www-form-urlencoded', b'a=%ff')):
            yield ('%s: Content-Type %s' % (where, content_type), method,
                   path, {'Content-Type': content_type}, body, {415})
    for path in ('/v1/leases/%ff', '/v1/pools/%ED%A0%80',
                 '/v1/leases?name=a%00b', '/v1/hosts?%ff=1',
                 '/v1/fabrics/a%0Ab'):
        yield ('GET %s' % path, 'GET', path, {}, None, {400})


def _send(port, method, path, headers, body, chunked=False):
    conn = http.client.HTTPConnection('127.0.0.1', port, timeout=60)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for name, value in dict(PROBE_HEADERS, **headers).items():
            conn.putheader(name, value)
        if chunked:
            conn.putheader('Transfer-Encoding', 'chunked')
        elif body is not None:
            conn.putheader('Content-Length', str(len(body)))
        conn.endheaders()
        try:
            for start in range(0, len(body or b''), 65536):
                chunk = body[start:start + 65536]
                conn.send(b'%x\r\n%s\r\n' % (len(chunk), chunk)
                          if chunked else chunk)
            if chunked:
                conn.send(b'0\r\n\r\n')
        except OSError:
            pass  # answered (413) before it was all sent
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def run_probes(port):
    """Send every probe; the number sent and the failures."""
    with open(DOCUMENT) as f:
        doc = yaml.safe_load(f)
    failures = []
    cases = list(probes(doc))
    cases.append(('POST /v1/fabrics: 1 MiB chunked body', 'POST',
                  '/v1/fabrics', {'Content-Type': 'application/json'},
                  b'{"name": "%s"}' % (b'x' * 2 ** 20), {413}))
    for label, method, path, headers, body, accepted in cases:
        try:
            status, text = _send(port, method, path, headers, body,
                                 chunked='chunked' in label)
        except (OSError, http.client.HTTPException) as exc:
            failures.append('%s: no answer (%s)' % (label, exc))
            continue
        problem = None
        if status not in accepted:
            problem = 'answered %d, expected %s' % (
                status, '/'.join(map(str, sorted(accepted))))
        elif len(text) > MAX_ERROR_BYTES:
            problem = 'a %d-byte error' % len(text)
        else:
            try:
                error = json.loads(text)['errors'][0]
                assert error['status'] == status and error['detail']
            except (ValueError, KeyError, IndexError, TypeError,
                    AssertionError):
                problem = 'not an API error body: %r' % text[:200]
        if problem:
            failures.append('%s: %s' % (label, problem))
    return len(cases), failures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--examples', type=int, default=10,
                        help='examples per operation and kind of data '
                             '(valid, invalid; default 10)')
    parser.add_argument('--keep', action='store_true',
                        help='keep the state directory and its log')
    args, extra = parser.parse_known_args(argv)
    workdir = tempfile.mkdtemp(prefix='composable-fuzz-')
    port = free_port()
    config = write_config(workdir, port)
    proc = subprocess.Popen(
        [os.path.join(BIN, 'composable-all'), '--config-file', config],
        stdout=open(os.path.join(workdir, 'stdout.log'), 'wb'),
        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    started = time.monotonic()
    try:
        base_url = 'http://127.0.0.1:%d' % port
        wait_http(base_url + '/', proc)
        rc = schemathesis(base_url, args, extra)
        sent, failures = run_probes(port)
        for failure in failures:
            print('fuzz: probe failed: %s' % failure)
        print('fuzz: %d probe(s) sent, %d failed' % (sent, len(failures)),
              flush=True)
        if failures:
            rc = rc or 1
    finally:
        stop(proc)
    found = report_tracebacks(workdir)
    if found:
        rc = rc or 1
    print('fuzz: %s after %.0f s (exit %s, %d traceback(s) from the '
          'service)' % ('passed' if rc == 0 else 'FAILED',
                        time.monotonic() - started, rc, found))
    if args.keep or rc:
        print('fuzz: state and logs kept in %s' % workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return rc


if __name__ == '__main__':
    sys.exit(main())
