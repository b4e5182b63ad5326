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

"""Lease churn benchmark: N concurrent clients create and delete memory and
GPU leases through the REST API against a real composable-conductor process
on MariaDB over RabbitMQ, with a real Placement service (uWSGI, its own
database on the same MariaDB server) that composable reports to, as clouds
run it (``--no-placement``: composable alone).

It prints throughput and latency, and checks all along (from consistent
database snapshots) that every pool's usage equals what its live leases
hold, that no pool or memory node is over-committed, that no device is in
two leases, and that no Placement resource provider holds more than its
capacity. After the churn it measures Placement's own rate on the same
provider layout with the same number of clients (placement_ceiling.py:
one allocation per request, then its delete). Its last line is one
summary line:

  lease_churn: creates_per_s=... placement_allocs_per_s=... ratio=...
  placement_calls_per_create=... p50_ms=... p99_ms=... overcommit=0

(on one line; without Placement, the Placement figures are absent).

Usage: tools/bench/lease_churn.py [--clients 64] [--seconds 30]
       [--no-placement]
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

import sqlalchemy as sa

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                '..', '..')))

from tests.functional import leftovers  # noqa: E402
from tests.functional import stack as stack_mod  # noqa: E402
from tools.bench import placement_ceiling  # noqa: E402
from tools.bench import placement_server  # noqa: E402

HOLDING = ('reserved', 'binding', 'bound', 'bind_failed', 'unbinding',
           'releasing', 'error')


def snapshot_problems(engine):
    """Violations seen in one consistent snapshot of the database."""
    problems = []
    holding = ', '.join("'%s'" % s for s in HOLDING)
    with engine.connect() as conn:
        conn = conn.execution_options(isolation_level='REPEATABLE READ')
        with conn.begin():
            pools = conn.execute(sa.text(
                'SELECT id, name, kind, total, reserved, used FROM pools'
            )).all()
            for pid, name, kind, total, reserved, used in pools:
                if used > total - reserved:
                    problems.append('pool %s over-committed: %d > %d' % (
                        name, used, total - reserved))
                if kind == 'memory':
                    held = conn.execute(sa.text(
                        'SELECT COALESCE(SUM(memory_mb), 0) FROM leases '
                        'WHERE memory_pool_id = :p AND status IN (%s)' %
                        holding), {'p': pid}).scalar()
                else:
                    held = conn.execute(sa.text(
                        'SELECT COUNT(*) FROM devices WHERE pool_id = :p '
                        'AND lease_id IS NOT NULL'), {'p': pid}).scalar()
                    wanted = conn.execute(sa.text(
                        'SELECT COALESCE(SUM(device_count), 0) FROM leases '
                        'WHERE device_pool_id = :p AND status IN (%s)' %
                        holding), {'p': pid}).scalar()
                    if int(wanted) != int(held):
                        problems.append('pool %s: leases hold %d devices, '
                                        'devices say %d' % (name, wanted,
                                                            held))
                if int(held) != used:
                    problems.append('pool %s: used %d, leases hold %d' % (
                        name, used, held))
            nodes = conn.execute(sa.text(
                'SELECT name, capacity_mb - reserved_mb, allocated_mb, '
                '(SELECT COALESCE(SUM(size_mb), 0) FROM memory_extents e '
                ' WHERE e.memory_node_id = n.id) FROM memory_nodes n')).all()
            for name, cap, allocated, held in nodes:
                if allocated > cap or int(held) != allocated:
                    problems.append('memory node %s: allocated %d of %d, '
                                    'extents %d' % (name, allocated, cap,
                                                    held))
            # A device row names one lease; a lease that is not holding
            # capacity must not own any.
            stale = conn.execute(sa.text(
                'SELECT COUNT(*) FROM devices d JOIN leases l ON '
                'd.lease_id = l.id WHERE l.status NOT IN (%s)' % holding
            )).scalar()
            if stale:
                problems.append('%d devices owned by leases that hold '
                                'nothing' % stale)
    return problems


def _stat(pid):
    with open('/proc/%d/stat' % pid) as f:
        return f.read().rsplit(')', 1)[1].split()


def cpu_seconds(pid):
    """User + system CPU seconds used so far by process ``pid``."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def group_cpu_seconds(pgid):
    """CPU seconds of the live processes of process group ``pgid`` (a
    uWSGI master and its workers), and of its children that were reaped."""
    total = 0.0
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            fields = _stat(int(entry))
        except OSError:
            continue
        if int(fields[2]) == pgid:
            total += (int(fields[11]) + int(fields[12]) + int(fields[13]) +
                      int(fields[14])) / os.sysconf('SC_CLK_TCK')
    return total


def pid_of(*names):
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            try:
                with open('/proc/%s/comm' % entry) as f:
                    if f.read().strip() in names:
                        return int(entry)
            except OSError:
                pass
    return None


def cpu_usage(stack, placement=None):
    """CPU seconds so far of the service processes, MariaDB, RabbitMQ and
    this benchmark (whose client threads share the machine too)."""
    usage = {name: group_cpu_seconds(proc.pid)
             for name, proc in stack.procs.items()}
    if placement is not None and placement.proc is not None:
        usage['placement'] = group_cpu_seconds(placement.proc.pid)
    for name, comms in (('mariadb', ('mariadbd', 'mysqld')),
                        ('rabbitmq', ('beam.smp',))):
        pid = pid_of(*comms)
        if pid:
            usage[name] = cpu_seconds(pid)
    usage['clients'] = cpu_seconds(os.getpid())
    return usage


class LoadClient(object):
    """A plain HTTP client for the load: the standard library's, which
    costs the shared CPUs about half of what requests does per call, so
    that more of them go to the service measured. (The service is still
    called as any client would: HTTP, JSON, a project's headers.)"""

    def __init__(self, endpoint, project):
        parsed = urllib.parse.urlsplit(endpoint)
        self.conn = http.client.HTTPConnection(parsed.hostname, parsed.port,
                                               timeout=60)
        self.headers = {'X-Project-Id': project, 'X-Roles': 'member,reader',
                        'OpenStack-API-Version': 'composable 1.0',
                        'Content-Type': 'application/json'}

    def request(self, method, path, body=None):
        """(status, body bytes). A connection the server closes after its
        answer is opened again for the next request; a failure is the
        caller's to count (never retried: a create may have happened)."""
        payload = None if body is None else json.dumps(body).encode()
        try:
            self.conn.request(method, path, body=payload,
                              headers=self.headers)
            resp = self.conn.getresponse()
            data = resp.read()
        except Exception:
            self.conn.close()
            raise
        if resp.will_close:
            self.conn.close()
        return resp.status, data


def percentile(values, pct):
    if not values:
        return 0.0
    ordered = sorted(values)
    k = min(len(ordered) - 1, int(round(pct / 100.0 * (len(ordered) - 1))))
    return ordered[k]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--clients', type=int, default=64)
    parser.add_argument('--seconds', type=float, default=30)
    parser.add_argument('--gpus', type=int, default=32)
    parser.add_argument('--memory-nodes', type=int, default=4)
    parser.add_argument('--db-host', default='127.0.0.1')
    parser.add_argument('--transport-url',
                        default='rabbit://guest:guest@127.0.0.1:5672/')
    parser.add_argument('--conductors', type=int, default=1)
    parser.add_argument('--apis', type=int, default=1,
                        help='composable-api processes (as several API '
                             'workers behind a load balancer); each client '
                             'talks to one of them')
    parser.add_argument('--api-server', choices=('uwsgi', 'standalone'),
                        default='uwsgi' if stack_mod.uwsgi_binary()
                        else 'standalone',
                        help='run composable.wsgi.api under uWSGI, as '
                             'deployments do (the default when uwsgi is '
                             'installed), or the standalone composable-api '
                             'server')
    parser.add_argument('--api-socket', choices=('http', 'router'),
                        default='http',
                        help="uWSGI's HTTP socket in the workers, or its "
                             'HTTP router in front (client keep-alive)')
    parser.add_argument('--api-processes', type=int, default=1,
                        help='uWSGI worker processes per API')
    parser.add_argument('--api-threads', type=int, default=8,
                        help='threads per uWSGI worker, or [api]workers of '
                             'the standalone API server')
    parser.add_argument('--rpc-threads', type=int, default=8,
                        help='[DEFAULT]executor_thread_pool_size of the '
                             'conductor')
    parser.add_argument('--no-placement', dest='placement',
                        action='store_false',
                        help='run composable without Placement (no '
                             'Placement service, no claims in it)')
    parser.add_argument('--placement-threads', type=int, default=8,
                        help='threads of the Placement uWSGI worker')
    parser.add_argument('--ceiling-seconds', type=float,
                        help="how long Placement's own rate is measured "
                             'after the churn (default: --seconds; 0: not)')
    args = parser.parse_args()

    import pymysql
    dbname = 'composable_bench_%s_%s' % (leftovers.run_tag(),
                                         uuid.uuid4().hex[:6])
    root = pymysql.connect(host=args.db_host, user='root', password='')
    root.cursor().execute('CREATE DATABASE %s CHARACTER SET utf8mb4' %
                          dbname)
    db_url = 'mysql+pymysql://root@%s/%s?charset=utf8mb4' % (args.db_host,
                                                             dbname)
    workdir = tempfile.mkdtemp(prefix='lease-churn-')
    extra = {'DEFAULT': {'executor_thread_pool_size': args.rpc_threads},
             'api': {'workers': args.api_threads}}
    placement = None
    if args.placement:
        placement = placement_server.PlacementServer(
            workdir, args.db_host, threads=args.placement_threads)
        # The periodic Placement pass at its default interval, as
        # deployed.
        extra['placement'] = placement.composable_config()
    # The conductor's default intervals, as deployed: the test suites'
    # one-second heartbeat and periodic tasks would be measured as well.
    stack = stack_mod.Stack(
        workdir, db_url, args.transport_url,
        heartbeat_interval=10, heartbeat_timeout=60, periodic_interval=30,
        extra=extra)
    engine = sa.create_engine(db_url)
    try:
        if placement is not None:
            placement.start()
        stack.dbsync()
        for i in range(args.conductors):
            stack.start_conductor('conductor-%d' % i)
            stack.wait_conductor('conductor-%d' % i)
        endpoints = []
        for i in range(args.apis):
            if i:
                stack.api_port = stack_mod.free_port()
                stack.endpoint = 'http://127.0.0.1:%d' % stack.api_port
            if args.api_server == 'uwsgi':
                stack.start_api_uwsgi('api-%d' % i,
                                      processes=args.api_processes,
                                      threads=args.api_threads,
                                      socket=args.api_socket)
            else:
                stack.start_api('api-%d' % i)
            endpoints.append(stack.endpoint)
        admin = stack_mod.Client(endpoints[0], project='admin')
        stack_mod.demo_inventory(
            admin, memory_nodes=['memory-%d' % i
                                 for i in range(args.memory_nodes)],
            node_mb=16384, gpus=args.gpus)
        print('lease_churn: %d clients for %.0f s; %d memory nodes x 16 GiB,'
              ' %d GPUs; api(s)=%d (%s, %d process(es) x %d threads) '
              'conductor(s)=%d on MariaDB over RabbitMQ; %s; logs in %s' % (
                  args.clients, args.seconds, args.memory_nodes, args.gpus,
                  args.apis, args.api_server,
                  args.api_processes if args.api_server == 'uwsgi' else 1,
                  args.api_threads, args.conductors,
                  'Placement (uWSGI, 1 process x %d threads, MariaDB)' %
                  args.placement_threads if placement else 'no Placement',
                  workdir), flush=True)
        if placement is not None:
            # Pools, memory nodes and devices are pushed to Placement by
            # casts: wait until both providers have their whole inventory
            # and Placement has been quiet for a second, so that none of
            # that is counted in the churn.
            want = sorted([args.gpus, args.memory_nodes * 16384])
            deadline = time.time() + 180
            quiet_since, seen = time.time(), -1
            while True:
                with placement.engine.connect() as conn:
                    totals = sorted(t for (t,) in conn.execute(sa.text(
                        'SELECT total FROM inventories')).all())
                count = placement.request_count()
                if count != seen:
                    quiet_since, seen = time.time(), count
                if totals == want and time.time() - quiet_since >= 1.0:
                    break
                if time.time() > deadline:
                    raise RuntimeError('the pools never reached Placement '
                                       '(inventories %s); see %s' % (
                                           totals, workdir))
                time.sleep(0.2)

        stop = threading.Event()
        lock = threading.Lock()
        latencies = []
        outcomes = {'reserved': 0, 'alloc_failed': 0, 'errors': 0,
                    'deleted': 0}
        problems = []

        def client(n):
            c = LoadClient(endpoints[n % len(endpoints)],
                           project='project-%d' % (n % 8))
            rnd = random.Random(n)
            while not stop.is_set():
                if rnd.random() < 0.5:
                    body = {'memory_mb': rnd.choice((1024, 2048))}
                else:
                    body = {'device_count': 1, 'device_kind': 'gpu'}
                body['name'] = 'churn-%d' % n
                t0 = time.perf_counter()
                try:
                    status, data = c.request('POST', '/v1/leases', body)
                except (OSError, http.client.HTTPException) as exc:
                    status, data = None, str(exc).encode()
                elapsed = time.perf_counter() - t0
                if status != 201:
                    with lock:
                        outcomes['errors'] += 1
                        if outcomes['errors'] < 5:
                            print('create failed: %s %s' % (
                                status, data[:300]), flush=True)
                    continue
                lease = json.loads(data)
                with lock:
                    latencies.append(elapsed)
                    outcomes[lease['status'] if lease['status'] in outcomes
                             else 'errors'] += 1
                try:
                    status, _ = c.request('DELETE',
                                          '/v1/leases/%s' % lease['uuid'])
                except (OSError, http.client.HTTPException):
                    status = None
                with lock:
                    if status == 204:
                        outcomes['deleted'] += 1
                    else:
                        outcomes['errors'] += 1

        def checker():
            while not stop.wait(1.0):
                found = snapshot_problems(engine)
                if placement is not None:
                    found += placement_server.overcommit_problems(
                        placement.engine)
                if found:
                    with lock:
                        problems.extend(found)

        threads = [threading.Thread(target=client, args=(n,), daemon=True)
                   for n in range(args.clients)]
        watcher = threading.Thread(target=checker, daemon=True)
        cpu_before = cpu_usage(stack, placement)
        calls_before = placement.request_count() if placement else 0
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        watcher.start()
        time.sleep(args.seconds)
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
        elapsed = time.perf_counter() - started
        cpu_after = cpu_usage(stack, placement)
        watcher.join()

        # Every delete is released in the background: wait for the last.
        deadline = time.time() + 120
        while time.time() < deadline:
            with engine.connect() as conn:
                busy = conn.execute(sa.text(
                    "SELECT COUNT(*) FROM leases WHERE status NOT IN "
                    "('released', 'alloc_failed')")).scalar()
            if not busy:
                break
            time.sleep(0.5)
        final = snapshot_problems(engine)
        with engine.connect() as conn:
            leftover = conn.execute(sa.text(
                'SELECT COALESCE(SUM(used), 0) FROM pools')).scalar()
        if leftover:
            final.append('pools still use %d after every lease was '
                         'deleted' % leftover)
        if busy:
            final.append('%d leases never finished releasing' % busy)
        if placement is not None:
            # Allocations of released leases are deleted after the
            # release: wait for the last.
            deadline = time.time() + 60
            while time.time() < deadline:
                left = placement_server.allocation_count(placement.engine)
                if not left:
                    break
                time.sleep(0.5)
            if left:
                final.append('Placement still holds the allocations of %d '
                             'consumers after every lease was released' %
                             left)
            final += placement_server.overcommit_problems(placement.engine)
            calls = placement.request_count() - calls_before
        problems.extend(final)

        creates = len(latencies)
        for problem in sorted(set(problems))[:20]:
            print('PROBLEM: %s' % problem)
        print('creates=%d (reserved=%d alloc_failed=%d) deletes=%d '
              'errors=%d in %.1f s' % (
                  creates, outcomes['reserved'], outcomes['alloc_failed'],
                  outcomes['deleted'], outcomes['errors'], elapsed))
        if latencies:
            print('create latency ms: mean=%.1f p50=%.1f p90=%.1f p99=%.1f '
                  'max=%.1f' % (statistics.mean(latencies) * 1000,
                                percentile(latencies, 50) * 1000,
                                percentile(latencies, 90) * 1000,
                                percentile(latencies, 99) * 1000,
                                max(latencies) * 1000))
        if latencies:
            # Where the machine's CPU goes, per create + delete: the
            # figure that decides throughput on a small box.
            print('cpu ms per create+delete: %s' % ' '.join(
                '%s=%.1f' % (name, (cpu_after[name] - cpu_before[name]) *
                             1000.0 / creates)
                for name in sorted(cpu_after) if name in cpu_before))
        ceiling = None
        ceiling_seconds = (args.seconds if args.ceiling_seconds is None
                           else args.ceiling_seconds)
        if placement is not None:
            print('placement calls during the churn: %d (%.2f per create '
                  'and its delete)' % (calls, calls / max(1, creates)))
        if placement is not None and ceiling_seconds:
            ceiling = placement_ceiling.measure(
                placement.endpoint, args.clients, ceiling_seconds,
                args.memory_nodes, args.gpus, placement.engine)
            print(placement_ceiling.summary(ceiling))
            problems.extend(ceiling['problems'])
        rate = creates / elapsed
        figures = ['creates_per_s=%.1f' % rate]
        if ceiling is not None:
            figures.append('placement_allocs_per_s=%.1f ratio=%.2f' % (
                ceiling['allocs_per_s'],
                rate / ceiling['allocs_per_s']
                if ceiling['allocs_per_s'] else 0.0))
        if placement is not None:
            figures.append('placement_calls_per_create=%.2f' % (
                calls / max(1, creates)))
        figures.append('p50_ms=%.1f p99_ms=%.1f overcommit=%d' % (
            percentile(latencies, 50) * 1000,
            percentile(latencies, 99) * 1000, len(set(problems))))
        print('lease_churn: %s' % ' '.join(figures), flush=True)
        return 1 if problems or outcomes['errors'] else 0
    finally:
        stack.stop()
        if placement is not None:
            placement.stop()
        engine.dispose()
        root.cursor().execute('DROP DATABASE IF EXISTS %s' % dbname)
        root.close()


if __name__ == '__main__':
    # Whatever the run leaves on the machine (mounts, targets, guests,
    # processes, databases) fails it, and is removed.
    with leftovers.guard():
        rc = main()
    sys.exit(rc)
