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

"""Placement's own ceiling: N concurrent clients each write one allocation
per request (``PUT /allocations/{consumer}``, a new consumer each time) on
sharing providers laid out as composable's lease churn benchmark lays out
its pools (one memory provider of ``memory_nodes`` x 16 GiB in steps of
1 GiB, one GPU provider of ``gpus`` units), then delete it
(``DELETE /allocations/{consumer}``), half of them memory (1 or 2 GiB),
half one GPU, as the lease churn clients ask.

This is the rate a client claiming one lease per Placement request can
reach at best; ``lease_churn.py`` runs it on its own Placement after the
churn and prints the ratio. Run alone, it starts a Placement of its own
(uWSGI, MariaDB) unless ``--endpoint`` names one.

Its last line:

  placement_ceiling: allocs_per_s=... p50_ms=... p99_ms=... refused=...
  overcommit=...
"""

import argparse
import http.client
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                '..', '..')))

from tests.functional import leftovers  # noqa: E402
from tools.bench import placement_server  # noqa: E402

MEMORY_RC = 'CUSTOM_COMPOSABLE_MEMORY_MB'
GPU_RC = 'CUSTOM_COMPOSABLE_GPU'
VERSION = 'placement 1.38'


class PlacementHTTP(object):
    """The standard library's HTTP client (cheaper on the shared CPUs than
    requests), speaking to Placement as an admin."""

    def __init__(self, endpoint):
        parsed = urllib.parse.urlsplit(endpoint)
        self.host, self.port = parsed.hostname, parsed.port
        self.prefix = parsed.path.rstrip('/')
        self.conn = None
        self.headers = {'X-Auth-Token': 'admin',
                        'OpenStack-API-Version': VERSION,
                        'Content-Type': 'application/json',
                        'Accept': 'application/json'}

    def request(self, method, path, body=None):
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port,
                                                   timeout=60)
        payload = None if body is None else json.dumps(body).encode()
        try:
            self.conn.request(method, self.prefix + path, body=payload,
                              headers=self.headers)
            resp = self.conn.getresponse()
            data = resp.read()
        except Exception:
            self.conn.close()
            self.conn = None
            raise
        if resp.will_close:
            self.conn.close()
            self.conn = None
        return resp.status, data


def _checked(client, method, path, body=None, ok=(200, 201, 204)):
    status, data = client.request(method, path, body)
    if status not in ok:
        raise RuntimeError('Placement said %s to %s %s: %s' % (
            status, method, path, data[:300]))
    return json.loads(data) if data else None


def make_layout(client, memory_nodes=4, gpus=32, node_mb=16384,
                step=1024):
    """Two sharing providers as composable reports its two pools; their
    uuids {resource class: provider uuid}."""
    layout = {}
    tag = uuid.uuid4().hex[:6]
    for rc, total, unit in ((MEMORY_RC, memory_nodes * node_mb, step),
                            (GPU_RC, gpus, 1)):
        _checked(client, 'PUT', '/resource_classes/%s' % rc)
        provider = str(uuid.uuid4())
        _checked(client, 'POST', '/resource_providers',
                 {'uuid': provider, 'name': 'ceiling-%s-%s' % (rc, tag)})
        _checked(client, 'PUT', '/resource_providers/%s/inventories' %
                 provider, {'resource_provider_generation': 0,
                            'inventories': {rc: {
                                'total': total, 'reserved': 0,
                                'min_unit': unit, 'max_unit': total,
                                'step_size': unit,
                                'allocation_ratio': 1.0}}})
        layout[rc] = provider
    return layout


def percentile(values, pct):
    if not values:
        return 0.0
    ordered = sorted(values)
    k = min(len(ordered) - 1, int(round(pct / 100.0 * (len(ordered) - 1))))
    return ordered[k]


def measure(endpoint, clients=64, seconds=30, memory_nodes=4, gpus=32,
            engine=None):
    """Run the load; a dict of figures. ``engine`` (Placement's database)
    enables the over-commit check, once a second all along."""
    layout = make_layout(PlacementHTTP(endpoint), memory_nodes, gpus)
    stop = threading.Event()
    lock = threading.Lock()
    latencies = []
    counts = {'refused': 0, 'errors': 0}
    problems = set()

    def client(n):
        http_client = PlacementHTTP(endpoint)
        rnd = random.Random(n)
        project = 'project-%d' % (n % 8)
        while not stop.is_set():
            if rnd.random() < 0.5:
                rc, amount = MEMORY_RC, rnd.choice((1024, 2048))
            else:
                rc, amount = GPU_RC, 1
            consumer = str(uuid.uuid4())
            body = {'allocations': {layout[rc]: {'resources': {rc: amount}}},
                    'consumer_generation': None, 'project_id': project,
                    'user_id': project, 'consumer_type': 'COMPOSABLE_LEASE'}
            t0 = time.perf_counter()
            try:
                status, data = http_client.request(
                    'PUT', '/allocations/%s' % consumer, body)
            except (OSError, http.client.HTTPException):
                status, data = None, b''
            elapsed = time.perf_counter() - t0
            with lock:
                if status == 204:
                    latencies.append(elapsed)
                elif status == 409 and b'exceed' in data.lower():
                    counts['refused'] += 1
                else:
                    counts['errors'] += 1
            if status != 204:
                continue
            try:
                status, _ = http_client.request(
                    'DELETE', '/allocations/%s' % consumer)
            except (OSError, http.client.HTTPException):
                status = None
            if status != 204:
                with lock:
                    counts['errors'] += 1

    def checker():
        while not stop.wait(1.0):
            problems.update(placement_server.overcommit_problems(engine))

    threads = [threading.Thread(target=client, args=(n,), daemon=True)
               for n in range(clients)]
    watcher = threading.Thread(target=checker, daemon=True)
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    if engine is not None:
        watcher.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    elapsed = time.perf_counter() - started
    if engine is not None:
        watcher.join()
        problems.update(placement_server.overcommit_problems(engine))
    return {'allocs': len(latencies), 'seconds': elapsed,
            'allocs_per_s': len(latencies) / elapsed,
            'mean_ms': (statistics.mean(latencies) * 1000
                        if latencies else 0.0),
            'p50_ms': percentile(latencies, 50) * 1000,
            'p99_ms': percentile(latencies, 99) * 1000,
            'refused': counts['refused'], 'errors': counts['errors'],
            'problems': sorted(problems)}


def summary(result):
    return ('placement_ceiling: allocs_per_s=%.1f p50_ms=%.1f p99_ms=%.1f '
            'refused=%d errors=%d overcommit=%d' % (
                result['allocs_per_s'], result['p50_ms'], result['p99_ms'],
                result['refused'], result['errors'],
                len(result['problems'])))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--clients', type=int, default=64)
    parser.add_argument('--seconds', type=float, default=30)
    parser.add_argument('--gpus', type=int, default=32)
    parser.add_argument('--memory-nodes', type=int, default=4)
    parser.add_argument('--db-host', default='127.0.0.1')
    parser.add_argument('--endpoint',
                        help='a running Placement (noauth2, token "admin");'
                             ' default: start one under uWSGI')
    parser.add_argument('--placement-threads', type=int, default=8)
    args = parser.parse_args()
    server = None
    try:
        endpoint, engine = args.endpoint, None
        if not endpoint:
            server = placement_server.PlacementServer(
                tempfile.mkdtemp(prefix='placement-ceiling-'), args.db_host,
                threads=args.placement_threads)
            server.start()
            endpoint, engine = server.endpoint, server.engine
        print('placement_ceiling: %d clients for %.0f s on %s' % (
            args.clients, args.seconds, endpoint), flush=True)
        result = measure(endpoint, args.clients, args.seconds,
                         args.memory_nodes, args.gpus, engine)
        for problem in result['problems'][:20]:
            print('PROBLEM: %s' % problem)
        print(summary(result), flush=True)
        return 1 if result['problems'] else 0
    finally:
        if server is not None:
            server.stop()


if __name__ == '__main__':
    with leftovers.guard():
        rc = main()
    sys.exit(rc)
