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
the service whatever happens. The run fails when schemathesis finds
anything or when the service logged a traceback.

Usage: tools/fuzz-api.py [--examples 25] [--keep] [SCHEMATHESIS ARGS...]
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

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


def schemathesis(base_url, args, extra):
    command = [os.path.join(BIN, 'schemathesis'), 'run', DOCUMENT,
               '--base-url', base_url,
               '--checks', 'all',
               # The standalone service runs with noauth: the document's
               # Keystone requirement is not enforced there on purpose.
               '--exclude-checks', 'ignored_auth',
               '--hypothesis-max-examples', str(args.examples),
               '--hypothesis-derandomize',
               '--hypothesis-suppress-health-check', 'all',
               '--stateful', 'links',
               '--request-timeout', '60000',
               '--header', 'OpenStack-API-Version: composable 1.0',
               '--header', 'X-Project-Id: fuzz',
               '--header', 'X-Roles: admin,member,reader',
               '--no-color'] + extra
    print('fuzz: %s' % ' '.join(command), flush=True)
    return subprocess.call(command)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--examples', type=int, default=25,
                        help='examples per operation (default 25)')
    parser.add_argument('--keep', action='store_true',
                        help='keep the state directory and its log')
    args, extra = parser.parse_known_args(argv)
    workdir = tempfile.mkdtemp(prefix='composable-fuzz-')
    port = free_port()
    config = write_config(workdir, port)
    log_path = os.path.join(workdir, 'composable-all.log')
    proc = subprocess.Popen(
        [os.path.join(BIN, 'composable-all'), '--config-file', config],
        stdout=open(os.path.join(workdir, 'stdout.log'), 'wb'),
        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    started = time.monotonic()
    try:
        base_url = 'http://127.0.0.1:%d' % port
        wait_http(base_url + '/', proc)
        rc = schemathesis(base_url, args, extra)
    finally:
        stop(proc)
    found = tracebacks(log_path)
    if found:
        with open(log_path, errors='replace') as f:
            lines = f.read().splitlines()
        print('fuzz: the service logged %d traceback(s); the first:' %
              len(found))
        print('\n'.join(lines[max(0, found[0] - 2):found[0] + 30]))
        rc = rc or 1
    print('fuzz: %s after %.0f s (schemathesis exit %s, %d traceback(s) '
          'in the service log)' % ('passed' if rc == 0 else 'FAILED',
                                   time.monotonic() - started, rc,
                                   len(found)))
    if args.keep or rc:
        print('fuzz: state and logs kept in %s' % workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return rc


if __name__ == '__main__':
    sys.exit(main())
