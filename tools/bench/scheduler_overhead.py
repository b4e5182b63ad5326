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

"""What ComposableFilter adds to a Nova scheduling request.

Runs Nova's own HostManager (nova.scheduler.host_manager, with its real
filter and weigher objects loaded from nova.conf the way nova-scheduler
loads them) over N fake compute hosts, and times the per-request work of
nova-scheduler after Placement answered: the filter pass and the weighing
(``get_filtered_hosts`` + ``get_weighed_hosts``, what
``SchedulerManager._get_sorted_hosts`` does).

Four configurations, measured interleaved so noise hits all alike, in
CPU time of the process (the machine's other load does not count):

* base:  Nova's default enabled_filters;
* noop:  the same plus AllHostsFilter, which does nothing: what Nova's
  filter handler charges for any extra enabled filter (it copies and
  logs the host list after each filter);
* nohint: the same plus ComposableFilter, request without the hint;
* hint:  the same plus ComposableFilter, request with
  ``composable_lease``: one HTTP call to the composable API per request
  (through keystoneauth, to an in-process WSGI fake behind
  wsgi-intercept; the pool's aggregate is cached), hosts matched on
  ``HostState.aggregates``.

By default every host reaches the lease's fabric, so the filter removes
no host and the weighing after it costs the same as in ``base``: the
figure is the filter's own cost, its worst case. With ``--in-fabric 0.4``
the filter leaves 40 % of the hosts and the request gets cheaper overall.

The last line is the summary (added_pct: hint vs base, medians):

  scheduler_overhead: hosts=1000 added_pct=...

Usage: tools/bench/scheduler_overhead.py [--hosts 1000] [--requests 300]
                                        [--in-fabric 1.0]
"""

import argparse
import datetime
import json
import os
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                '..', '..')))
# nova-scheduler runs on native threads; so does this benchmark.
os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', '1')

ENDPOINT = 'http://composable-bench.test:6590'
AGG = str(uuid.uuid4())
OTHER_AGG = str(uuid.uuid4())
LEASE = str(uuid.uuid4())
POOL = str(uuid.uuid4())
FABRIC = str(uuid.uuid4())


class FakeComposableAPI(object):
    """GET /v1/{leases,pools,fabrics}/<uuid>, counting calls."""

    def __init__(self):
        self.calls = 0
        self.bodies = {
            '/v1/leases/%s' % LEASE: {
                'uuid': LEASE, 'project_id': 'p1', 'status': 'reserved',
                'instance_uuid': None, 'memory_pool_uuid': POOL,
                'device_pool_uuid': None},
            '/v1/pools/%s' % POOL: {'uuid': POOL, 'fabric_uuid': FABRIC},
            '/v1/fabrics/%s' % FABRIC: {'uuid': FABRIC,
                                        'aggregate_uuid': AGG},
        }

    def __call__(self, environ, start_response):
        self.calls += 1
        body = self.bodies.get(environ['PATH_INFO'])
        data = json.dumps(body or {'errors': []}).encode()
        start_response('200 OK' if body else '404 Not Found',
                       [('Content-Type', 'application/json'),
                        ('Content-Length', str(len(data)))])
        return [data]


def build(args):
    from nova.scheduler import host_manager

    class BenchHostManager(host_manager.HostManager):
        """Nova's HostManager without its database look-ups."""

        def refresh_cells_caches(self):
            pass

        def _init_aggregates(self):
            pass

        def _init_instance_info(self):
            pass

    return BenchHostManager


def make_hosts(count, in_fabric):
    from nova import objects
    from nova.scheduler import host_manager
    ours = objects.Aggregate(id=1, uuid=AGG, name='fabric', hosts=[],
                             metadata={})
    other = objects.Aggregate(id=2, uuid=OTHER_AGG, name='az', hosts=[],
                              metadata={})
    now = datetime.datetime.utcnow()
    hosts = []
    for i in range(count):
        state = host_manager.HostState('cn%05d' % i, 'cn%05d' % i,
                                       str(uuid.uuid4()))
        state.service = {'disabled': False, 'disabled_reason': None,
                         'last_seen_up': now, 'created_at': now,
                         'forced_down': False, 'host': state.host,
                         'binary': 'nova-compute'}
        reaches = (i % 100) < in_fabric * 100
        state.aggregates = [other, ours] if reaches else [other]
        state.free_ram_mb = 65536 + (i % 97) * 512
        state.total_usable_ram_mb = 262144
        state.free_disk_mb = 1024 * 1024
        state.total_usable_disk_gb = 2048
        state.vcpus_total = 64
        state.vcpus_used = i % 64
        state.num_instances = i % 40
        state.num_io_ops = i % 8
        state.limits = {}
        state.cpu_allocation_ratio = 4.0
        state.ram_allocation_ratio = 1.0
        state.disk_allocation_ratio = 1.0
        hosts.append(state)
    return hosts


def make_spec(hint):
    from nova import context
    from nova import objects
    ctx = context.RequestContext('u1', 'p1')  # a new request id each time
    flavor = objects.Flavor(id=1, name='m1', memcpu=None, vcpus=2,
                            memory_mb=4096, root_gb=20, ephemeral_gb=0,
                            swap=0, extra_specs={})
    return objects.RequestSpec(
        ctx, project_id='p1', user_id='u1',
        instance_uuid=str(uuid.uuid4()), num_instances=1, flavor=flavor,
        image=objects.ImageMeta.from_dict({'properties': {}}),
        instance_group=None, force_hosts=None, force_nodes=None,
        ignore_hosts=None, availability_zone=None,
        scheduler_hints={'composable_lease': [LEASE]} if hint else {})


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--hosts', type=int, default=1000)
    parser.add_argument('--requests', type=int, default=300)
    parser.add_argument('--in-fabric', type=float, default=1.0,
                        help='share of the hosts on the lease\'s fabric')
    args = parser.parse_args()

    import nova.conf
    from nova import objects
    from wsgi_intercept import interceptor
    objects.register_all()
    conf = nova.conf.CONF
    conf([], project='nova', default_config_files=[],
         default_config_dirs=[])
    from composable.nova import scheduler  # noqa: F401  [composable]

    api = FakeComposableAPI()
    intercept = interceptor.RequestsInterceptor(lambda: api, url=ENDPOINT)
    intercept.install_intercept()
    conf.set_override('auth_type', 'none', 'composable')
    conf.set_override('endpoint_override', ENDPOINT, 'composable')
    conf.set_override('track_instance_changes', False, 'filter_scheduler')
    # The fake hosts' heartbeat is never refreshed: keep them "up" however
    # long the run takes.
    conf.set_override('service_down_time', 10 ** 9)
    conf.set_override('available_filters', [
        'nova.scheduler.filters.all_filters',
        'composable.nova.scheduler.ComposableFilter'], 'filter_scheduler')
    defaults = list(conf.filter_scheduler.enabled_filters)

    manager_cls = build(args)
    managers = {}
    conf.set_override('enabled_filters', defaults, 'filter_scheduler')
    managers['base'] = manager_cls()
    conf.set_override('enabled_filters',
                      defaults + ['ComposableFilter'], 'filter_scheduler')
    managers['nohint'] = managers['hint'] = manager_cls()
    conf.set_override('enabled_filters',
                      defaults + ['AllHostsFilter'], 'filter_scheduler')
    managers['noop'] = manager_cls()
    hosts = make_hosts(args.hosts, args.in_fabric)

    def one(name):
        manager = managers[name]
        spec = make_spec(name == 'hint')
        start = time.process_time()
        filtered = manager.get_filtered_hosts(hosts, spec)
        weighed = manager.get_weighed_hosts(filtered, spec)
        elapsed = time.process_time() - start
        return elapsed, len(filtered), weighed

    names = ('base', 'noop', 'nohint', 'hint')
    counts = {}
    for name in names:  # warm up (imports, caches, the pool's aggregate)
        for _ in range(10):
            _, counts[name], _ = one(name)
    times = {name: [] for name in names}
    calls_before = api.calls
    for _ in range(args.requests):
        for name in names:
            elapsed, passing, _ = one(name)
            if passing != counts[name]:
                raise SystemExit('%s: %d hosts passed, %d expected' %
                                 (name, passing, counts[name]))
            times[name].append(elapsed)
    calls = api.calls - calls_before
    intercept.uninstall_intercept()

    med = {name: statistics.median(values) * 1000.0
           for name, values in times.items()}

    def pct(name, ref='base'):
        return (med[name] - med[ref]) / med[ref] * 100.0

    print('hosts=%d requests=%d filters=%s' % (
        args.hosts, args.requests, ','.join(defaults)))
    for name in names:
        print('%-7s median_ms=%.3f p90_ms=%.3f hosts_passing=%d' % (
            name, med[name],
            sorted(times[name])[int(len(times[name]) * 0.9)] * 1000.0,
            counts[name]))
    print('composable API calls: %d for %d requests with the hint '
          '(%.2f per request, none per host)' % (
              calls, args.requests, calls / float(args.requests)))
    print('any extra filter (AllHostsFilter): added_pct=%.2f' % pct('noop'))
    print('ComposableFilter without the hint: added_pct=%.2f' %
          pct('nohint'))
    print('ComposableFilter with the hint vs AllHostsFilter: added_pct=%.2f'
          % pct('hint', 'noop'))
    added_pct = pct('hint')
    print('scheduler_overhead: hosts=%d added_pct=%.2f' % (args.hosts,
                                                           added_pct))


if __name__ == '__main__':
    main()
