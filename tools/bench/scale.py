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

"""Scale benchmark: how the conductor's periodic passes, the lease list
and a lease's detail grow with the number of leases.

For each N (``--sizes``, default 1,000, 10,000 and 100,000 leases;
``--quick``: 1,000 and 10,000), it makes a MariaDB database of its own
(its name carries the run's tag, so the leftover check finds it; dropped
at the end, also on failure), brings it to the latest schema with the
alembic migrations, and fills it with bulk INSERTs: N leases (a fifth of
them live, in the statuses a running region shows, the rest released
history), their action rows, extents, attachments and usage samples,
memory pools and nodes, hosts, and 1,000 devices in one fabric.

Then, in a fresh process (a conductor's): every periodic pass of the
conductor, called directly against that database, each the median of
``--repeat`` runs: the takeover of dead conductors' leases, the start and
expiry passes, the reconciler, the memory node check, the fabric sync,
the usage pruning, the elastic resize pass, the Placement pass and the
heartbeat. What lies outside composable answers at once from in-process
fakes, named so in the output: the agents (BenchAgents), Placement
(BenchPlacement) and the fabric (BenchFabric: the "fake" fabric
driver's discovery of the 1,000 devices), so that what is measured is
composable's own work and queries. In the steady state filled here
(nothing due, error leases backing off) a pass acts on no lease; a pass
that does is reported.

Then, in a fresh process of its own (an API's: the application built and
what it made frozen out of the cyclic garbage collector's walks, as
composable-api does), the REST API's WSGI application (noauth): GET
/v1/leases, its first page (all projects), a filtered page (one
project's bound leases) and the last page by marker, p50/p99; one lease
with 1,000 actions (GET /v1/leases/{lease} and its /actions); and the
process's peak RSS after the passes.

It prints a table and one summary line

  scale: <measure>_exp=... ... meets_targets=yes|no

with the growth exponent of each measure (least-squares slope of log
time on log N) and whether each meets the targets at the largest N:
every pass at most a tenth of its interval (read from composable's
configuration), list p99 at most 100 ms, no exponent above 1.1.

Usage: tools/bench/scale.py [--sizes 1000,10000,100000] [--quick]
       [--repeat 5] [--requests 40] [--page-size 50]
"""

import argparse
import datetime
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
import uuid

import sqlalchemy as sa

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                '..', '..')))

from tests.functional import leftovers  # noqa: E402

PROJECTS = 100
DEVICES = 1000
MEMORY_NODES = 40
STEP_MB = 1024
LIVE_SHARE = 0.2
# Live leases by status (the rest of the leases are released).
LIVE_MIX = (('bound', 0.60), ('reserved', 0.24), ('requested', 0.04),
            ('alloc_failed', 0.04), ('bind_failed', 0.04), ('error', 0.04))
ELASTIC_SHARE = 0.1      # of the bound memory leases
SAMPLES_PER_LEASE = 10   # usage samples of a bound memory lease
ELASTIC_SAMPLES = 60     # of a bound elastic lease (one an minute)
HISTORY_ACTIONS = 1000   # of the one lease whose detail is measured
LIST_P99_TARGET_MS = 100.0
EXPONENT_TARGET = 1.1
BATCH = 5000


def _uuid(rng):
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def load_average():
    return '%.2f %.2f %.2f' % os.getloadavg()


# ---------------------------------------------------------------- fill

def _insert(conn, table, rows):
    for start in range(0, len(rows), BATCH):
        conn.execute(table.insert(), rows[start:start + BATCH])


def fill(engine, n, devices=DEVICES, seed=26, now=None):
    """Fill an empty composable database (at the latest schema) with a
    region of ``n`` leases, in bulk. Returns a dict of what the measures
    need: the uuid of the lease with the long action history, counts."""
    from composable.db import models

    rng = random.Random(seed)
    now = now or datetime.datetime.utcnow().replace(microsecond=0)
    t = {name: models.Base.metadata.tables[name] for name in (
        'fabrics', 'hosts', 'pools', 'memory_nodes', 'devices', 'leases',
        'memory_extents', 'attachments', 'lease_actions', 'lease_usage',
        'conductors')}
    n_hosts = max(20, n // 50)
    n_devices = devices
    info = {'leases': n, 'hosts': n_hosts, 'device_count': n_devices}

    def stamp(when):
        return {'created_at': when, 'updated_at': when}

    fabrics = [dict(id=1, uuid=_uuid(rng), name='fabric-0', driver='fake',
                    description='scale benchmark', **stamp(now))]
    hosts = [dict(id=i + 1, uuid=_uuid(rng), name='compute-%05d' % i,
                  fabric_id=1, properties={},
                  initiator_iqn='iqn.2026-11.org.openstack:compute-%05d' % i,
                  **stamp(now)) for i in range(n_hosts)]
    pool_rows = [
        ('memory-a', 'memory', 'CUSTOM_COMPOSABLE_MEMORY_MB', STEP_MB),
        ('memory-b', 'memory', 'CUSTOM_COMPOSABLE_MEMORY_MB', STEP_MB),
        ('gpu-pool', 'gpu', 'CUSTOM_COMPOSABLE_GPU', 1),
        ('nvme-pool', 'pci', 'CUSTOM_COMPOSABLE_PCI', 1)]
    pools = [dict(id=i + 1, uuid=_uuid(rng), name=name, kind=kind,
                  resource_class=rc, fabric_id=1, traits=[], total=0,
                  reserved=0, used=0, step_size=step,
                  provider_uuid=_uuid(rng), **stamp(now))
             for i, (name, kind, rc, step) in enumerate(pool_rows)]
    memory_pools, gpu_pool, nvme_pool = (1, 2), 3, 4
    devices = []
    for i in range(n_devices):
        gpu = i < n_devices * 4 // 5
        address = 'scale-%s-%04d' % ('gpu' if gpu else 'nvme', i)
        model = 'BenchGPU-16G' if gpu else 'BenchNVMe-1T'
        devices.append(dict(
            id=i + 1, uuid=_uuid(rng), name=address,
            pool_id=gpu_pool if gpu else nvme_pool, address=address,
            kind='gpu' if gpu else 'nvme', model=model, traits=[],
            state='available', lease_id=None, health='ok', **stamp(now)))

    # Leases: ids in creation order over the last 30 days; the oldest
    # are released history, the newest a fifth live.
    n_live = max(len(LIVE_MIX), int(n * LIVE_SHARE))
    start = now - datetime.timedelta(days=30)
    span = (now - start).total_seconds() - 3600
    live_statuses = []
    for status, share in LIVE_MIX:
        live_statuses += [status] * int(round(share * n_live))
    live_statuses = (live_statuses + ['bound'] * n_live)[:n_live]
    rng.shuffle(live_statuses)
    leases, extents, attachments, actions, usage = [], [], [], [], []
    node_load = [0] * MEMORY_NODES
    free_devices = list(range(n_devices))
    rng.shuffle(free_devices)
    action_id = [0]
    extent_id = [0]

    def action(lease_id, name, when, result='success', message=None,
               finished=True):
        action_id[0] += 1
        actions.append(dict(
            id=action_id[0], lease_id=lease_id, action=name,
            request_id='req-%s' % _uuid(rng), user_id='user-bench',
            project_id=None, start_time=when,
            finish_time=when + datetime.timedelta(seconds=2)
            if finished else None, result=result, message=message,
            **stamp(when)))

    holding = ('reserved', 'bound', 'bind_failed', 'error')
    elastic_uuid = None
    for i in range(n):
        lease_id = i + 1
        created = start + datetime.timedelta(seconds=span * i / n)
        live = i >= n - n_live
        status = live_statuses[i - (n - n_live)] if live else 'released'
        project = 'project-%03d' % rng.randrange(PROJECTS)
        device_lease = status in holding and free_devices and \
            rng.random() < 0.4
        if not live:
            device_lease = rng.random() < 0.4
        row = dict(
            id=lease_id, uuid=_uuid(rng), name='lease-%d' % lease_id,
            live_name=None, description=None, project_id=project,
            user_id='user-%s' % project, memory_mb=0, device_count=0,
            device_kind=None, device_model=None, device_traits=[],
            requested_pools=None, requested_devices=None,
            memory_pool_id=None, device_pool_id=None, start_at=None,
            end_at=None, host_id=None, instance_uuid=None,
            attach_mode='host', placement_consumer=None, status=status,
            fault=None, reservation=None,
            elastic=None, elastic_low_since=None, **stamp(created))
        if live:
            row['live_name'] = row['name']
            row['updated_at'] = now - datetime.timedelta(
                seconds=rng.randrange(3600))
        if device_lease:
            gpu = rng.random() < 0.75
            row.update(device_count=1, device_kind='gpu' if gpu else 'nvme',
                       device_pool_id=gpu_pool if gpu else nvme_pool)
        else:
            row.update(memory_mb=STEP_MB * rng.randint(1, 8),
                       memory_pool_id=memory_pools[i % 2])
        if status == 'released':
            row['end_at'] = created + datetime.timedelta(
                hours=rng.randint(1, 72))
        elif rng.random() < 0.5:
            row['end_at'] = now + datetime.timedelta(
                days=rng.randint(1, 30))
        if status == 'requested':
            row['start_at'] = now + datetime.timedelta(
                hours=rng.randint(1, 96))
        if status in ('bound', 'bind_failed') or \
                (status == 'error' and rng.random() < 0.5):
            row['host_id'] = rng.randrange(n_hosts) + 1
            row['instance_uuid'] = _uuid(rng)
        if status in holding and device_lease:
            dev = devices[free_devices.pop()]
            dev['lease_id'] = lease_id
            dev['state'] = 'attached' if status == 'bound' else 'reserved'
            if status == 'bound':
                dev['pci_address'] = '0000:%02x:00.0' % (lease_id % 250)
        elif status in holding:
            node = i % MEMORY_NODES
            if node // (MEMORY_NODES // 2) != (row['memory_pool_id'] - 1):
                node = (node + MEMORY_NODES // 2) % MEMORY_NODES
            node_load[node] += row['memory_mb']
            extent_id[0] += 1
            exported = status == 'bound'
            extents.append(dict(
                id=extent_id[0], uuid=_uuid(rng), lease_id=lease_id,
                memory_node_id=node + 1, size_mb=row['memory_mb'], index=0,
                target_iqn='iqn.2010-10.org.openstack.composable:%d' %
                extent_id[0] if exported else None,
                lun=1 if exported else None,
                export_state='exported' if exported else 'allocated',
                **stamp(created)))
        if status == 'bound':
            attachments.append(dict(
                uuid=_uuid(rng), lease_id=lease_id, host_id=row['host_id'],
                instance_uuid=row['instance_uuid'], mode='host',
                state='attached', details={}, **stamp(created)))
        if status == 'bound' and row['memory_mb'] and \
                rng.random() < ELASTIC_SHARE:
            # Elastic, predicted low for a while: a shrink waits for the
            # hysteresis (the benchmark makes it long), so a pass decides
            # and changes nothing.
            row['elastic'] = {'min_mb': STEP_MB, 'max_mb': 16 * STEP_MB,
                              'observation_window': 3600,
                              'prediction_window': 300, 'headroom': 0.1}
            grown = max(row['memory_mb'], 4 * STEP_MB)
            node_load[extents[-1]['memory_node_id'] - 1] += \
                grown - row['memory_mb']
            row['memory_mb'] = extents[-1]['size_mb'] = grown
            row['elastic_low_since'] = now - datetime.timedelta(minutes=5)
            elastic_uuid = elastic_uuid or row['uuid']
            samples = ELASTIC_SAMPLES
        elif status == 'bound' and row['memory_mb']:
            samples = SAMPLES_PER_LEASE
        else:
            samples = 0
        for k in range(samples):
            usage.append(dict(
                lease_id=lease_id,
                taken_at=now - datetime.timedelta(minutes=samples - k),
                used_mb=row['memory_mb'] // 4 + rng.randrange(64),
                size_mb=row['memory_mb'], **stamp(now)))
        # The action log: create, bind, then the end.
        action(lease_id, 'create', created,
               result='error' if status == 'alloc_failed' else 'success')
        if status in ('bound', 'bind_failed', 'error') or \
                (status == 'released' and rng.random() < 0.7):
            action(lease_id, 'bind', created + datetime.timedelta(
                minutes=1), result='error' if status == 'bind_failed'
                else 'success')
        if status == 'released':
            action(lease_id, rng.choice(('delete', 'expire')),
                   row['end_at'] or created)
        elif status == 'error':
            action(lease_id, 'delete', now - datetime.timedelta(hours=6),
                   result='error', message='the memory node did not answer')
            # Backing off: ten failed attempts, the last just now.
            for k in range(10):
                action(lease_id, 'reconcile',
                       now - datetime.timedelta(minutes=10 - k),
                       result='error',
                       message='the memory node did not answer')
        leases.append(row)

    # One bound lease with a long history (binds and unbinds).
    history = next(r for r in reversed(leases) if r['status'] == 'bound')
    for k in range(HISTORY_ACTIONS - 2):
        action(history['id'], ('unbind', 'bind')[k % 2],
               now - datetime.timedelta(minutes=HISTORY_ACTIONS - k))
    info['history_lease'] = history['uuid']
    info['history_actions'] = sum(1 for a in actions
                                  if a['lease_id'] == history['id'])
    info['elastic_lease'] = elastic_uuid
    # Old samples the pruning deletes on its first pass.
    for k in range(n // 10):
        usage.append(dict(
            lease_id=leases[k]['id'],
            taken_at=now - datetime.timedelta(days=8, minutes=k % 600),
            used_mb=STEP_MB, size_mb=STEP_MB, **stamp(now)))

    memory_nodes = []
    for k in range(MEMORY_NODES):
        capacity = max(64 * STEP_MB, (node_load[k] * 5 // 4 // STEP_MB + 1)
                       * STEP_MB)
        memory_nodes.append(dict(
            id=k + 1, uuid=_uuid(rng), name='memory-%02d' % k,
            pool_id=memory_pools[k // (MEMORY_NODES // 2)],
            capacity_mb=capacity, reserved_mb=0, allocated_mb=node_load[k],
            exporter='noop', portal='127.0.0.1:3260', transport='tcp',
            enabled=True, **stamp(now)))
    for pool in pools:
        if pool['kind'] == 'memory':
            nodes = [m for m in memory_nodes if m['pool_id'] == pool['id']]
            pool['total'] = sum(m['capacity_mb'] for m in nodes)
            pool['used'] = sum(m['allocated_mb'] for m in nodes)
        else:
            mine = [d for d in devices if d['pool_id'] == pool['id']]
            pool['total'] = len(mine)
            pool['used'] = sum(1 for d in mine if d['lease_id'])
    conductors = [
        dict(hostname='scale-conductor', online=True, heartbeat_at=now,
             **stamp(now)),
        # A conductor that stopped long ago and holds nothing.
        dict(hostname='scale-conductor-gone', online=False,
             heartbeat_at=now - datetime.timedelta(days=3), **stamp(now))]

    with engine.begin() as conn:
        for name, rows in (('fabrics', fabrics), ('hosts', hosts),
                           ('pools', pools), ('memory_nodes', memory_nodes),
                           ('leases', leases), ('devices', devices),
                           ('memory_extents', extents),
                           ('attachments', attachments),
                           ('lease_actions', actions),
                           ('lease_usage', usage),
                           ('conductors', conductors)):
            # Every row of one table with the same keys (executemany).
            keys = set().union(*(r.keys() for r in rows)) if rows else ()
            rows = [dict({k: None for k in keys}, **r) for r in rows]
            _insert(conn, t[name], rows)
            info[name] = len(rows)
    return info


# ---------------------------------------------------------------- fakes

class BenchAgents(object):
    """The composable-agents of the memory nodes, faked in process: each
    reports at once the extents the database gave it when the fake was
    made (what a healthy node reports). Nothing else is expected of an
    agent in the benchmark's steady state; a call that comes anyway is
    refused, so a pass that acts shows as one."""

    def __init__(self, context):
        from composable.db import api as db_api
        from composable.db import models
        self.calls = 0
        self.reports = {}
        with db_api.reader(context) as session:
            nodes = dict(session.query(models.MemoryNode.id,
                                       models.MemoryNode.name).all())
            for name in nodes.values():
                self.reports[name] = {
                    'simulated': False, 'extent_uuids': [],
                    'exported_extent_uuids': [], 'total_mb': None,
                    'path': '/bench-fake'}
            for uuid_, node_id, state in session.query(
                    models.MemoryExtent.uuid,
                    models.MemoryExtent.memory_node_id,
                    models.MemoryExtent.export_state):
                report = self.reports[nodes[node_id]]
                report['extent_uuids'].append(uuid_)
                if state == 'exported':
                    report['exported_extent_uuids'].append(uuid_)

    def get_memory_report(self, context, node):
        self.calls += 1
        return self.reports[node]

    def __getattr__(self, name):
        def refused(*args, **kwargs):
            self.calls += 1
            raise RuntimeError('BenchAgents does not answer %s' % name)
        return refused


class BenchFabric(object):
    """What the fabric reports, faked in process: the "fake" fabric
    driver's discovery answers at once with the devices the database
    holds, healthy and where the database says (a fabric that agrees
    with composable). The fake driver reads a simulated inventory from
    the fabric's driver_info; a thousand devices there would make every
    lease read drag a large fabric row along, which no real driver's
    driver_info does, so the answer is given here instead."""

    def __init__(self, context):
        from composable.db import api as db_api
        from composable.db import models
        from composable import fabric as fabric_drivers
        with db_api.reader(context) as session:
            self.inventory = [
                {'address': address, 'kind': kind, 'model': model,
                 'health': 'ok', 'hosts': None, 'bound_to': None}
                for address, kind, model in session.query(
                    models.Device.address, models.Device.kind,
                    models.Device.model).order_by(models.Device.id)]
        self.calls = 0
        driver = fabric_drivers.get_driver('fake')
        driver.discover = self.discover

    def discover(self, fabric):
        self.calls += 1
        return [dict(item) for item in self.inventory]


class BenchPlacement(object):
    """Placement, faked in process: the providers of the pools and the
    allocations the database says each lease holds, answered at once
    (the state of a region where Placement agrees with composable)."""

    def __init__(self, context):
        from composable.common import states
        from composable.conductor.placement import client as pclient
        from composable.conductor.placement import sync
        from composable.db import api as db_api
        from composable.db import models
        # What each lease holds, from the leases loaded whole (not the
        # pass's own bulk reading of it, which this checks: a pass that
        # reads it wrong writes, and the output says so).
        with db_api.reader(context) as session:
            pools = session.query(models.Pool).all()
            leases = session.query(models.Lease).filter(
                models.Lease.status != states.RELEASED).all()
        self.providers = {
            p.provider_uuid: {'uuid': p.provider_uuid, 'generation': 1,
                              'name': pclient.provider_name(p.name),
                              'parent_provider_uuid': None,
                              'root_provider_uuid': p.provider_uuid}
            for p in pools if p.provider_uuid}
        self.consumers = {}
        self.by_provider = {uuid_: {} for uuid_ in self.providers}
        for lease in leases:
            wanted = sync.claimed_resources(lease)
            if not wanted:
                continue
            self.consumers[lease.uuid] = {
                'allocations': {rp: {'resources': res}
                                for rp, res in wanted.items()}}
            for rp, res in wanted.items():
                self.by_provider[rp][lease.uuid] = dict(res)
        self.calls = 0
        self.writes = 0

    def _call(self):
        self.calls += 1

    def get_provider(self, uuid_):
        self._call()
        return self.providers.get(uuid_)

    def get_provider_by_name(self, name):
        self._call()
        return next((p for p in self.providers.values()
                     if p['name'] == name), None)

    def list_providers(self, *args, **kwargs):
        self._call()
        return list(self.providers.values())

    def set_traits(self, uuid_, traits):
        self._call()
        return False

    set_aggregates = set_traits
    set_inventories = set_traits

    def get_allocations(self, consumer):
        self._call()
        return self.consumers.get(consumer, {'allocations': {}})

    def get_provider_allocations(self, uuid_):
        # {consumer: {resource class: amount}}, as the report client
        # gives Placement's answer.
        self._call()
        return self.by_provider.get(uuid_, {})

    def put_allocations(self, *args, **kwargs):
        self._call()
        self.writes += 1
        return True

    def delete_allocations(self, consumer):
        self._call()
        self.writes += 1
        return True

    def __getattr__(self, name):
        raise AttributeError('BenchPlacement does not answer %s' % name)


# ---------------------------------------------------------------- measures

def configure(db_url):
    """composable's configuration for an in-process conductor and API on
    ``db_url``: defaults, noauth, the in-process message transport."""
    import oslo_messaging as messaging

    from composable.common import rpc
    from composable import conf
    from composable.db import api as db_api
    CONF = conf.CONF
    CONF([], project='composable', default_config_files=[],
         default_config_dirs=[])
    CONF.set_override('connection', db_url, 'database')
    # The API and the conductor are in this process: the in-process
    # transport (nothing is sent over it in the steady state).
    messaging.get_rpc_transport(CONF, url='fake:/')
    CONF.set_override('transport_url', 'fake:/')
    CONF.set_override('auth_strategy', 'noauth')
    # Elastic leases predicted low stay at their size during the run.
    CONF.set_override('shrink_hysteresis', 10 ** 8, 'elastic')
    db_api.reset_facade()
    rpc.cleanup()
    rpc.init(CONF)
    return CONF


def passes(host='scale-conductor'):
    """{name: (function, interval seconds, fakes)}: every periodic pass
    of a conductor, as ConductorManager.start() runs them, with its
    interval from the configuration."""
    from composable.common import context as ctx_mod
    from composable import conf
    from composable.conductor.elastic import usage as lease_usage
    from composable.conductor import fabric_sync
    from composable.conductor import manager as manager_mod
    from composable.conductor import node_reports
    from composable.conductor.placement import sync as placement_sync
    from composable.conductor import reconciler
    from composable.db import api as db_api
    CONF = conf.CONF
    admin = ctx_mod.get_admin_context()
    agents = BenchAgents(admin)
    placement = BenchPlacement(admin)
    bench_fabric = BenchFabric(admin)
    manager = manager_mod.ConductorManager(host, agent_api=agents)
    spawned = []

    def spawn(reservation, fn, *args, **kwargs):
        # A pass that starts a flow is not in the steady state: noted,
        # and the flow is not run.
        spawned.append(getattr(fn, '__name__', str(fn)))
        reservation.release()

    manager.spawn = spawn
    periodic = CONF.conductor.periodic_interval
    table = {
        'heartbeat': (lambda: db_api.conductor_heartbeat(admin, host),
                      CONF.conductor.heartbeat_interval),
        'takeover': (lambda: manager.periodic.take_over_dead_conductors(
            admin), periodic),
        'start': (lambda: manager.periodic.start_due_leases(admin),
                  periodic),
        'expire': (lambda: manager.periodic.expire_leases(admin), periodic),
        'reconcile': (lambda: reconciler.Reconciler(manager).run(admin),
                      CONF.conductor.reconcile_interval),
        'node_check': (lambda: node_reports.check_memory_nodes(
            admin, agents), CONF.conductor.node_check_interval),
        'fabric_sync': (lambda: fabric_sync.FabricSync(host).run(admin),
                        CONF.conductor.fabric_sync_interval),
        'usage_prune': (lambda: lease_usage.prune(admin),
                        CONF.elastic.prune_interval),
        'elastic_resize': (lambda: manager.resizer.run(admin),
                           CONF.elastic.resize_interval),
        'placement': (lambda: placement_sync.reconcile(admin, placement),
                      CONF.placement.composable_reconcile_interval),
    }
    return table, {'agents': agents, 'placement': placement,
                   'fabric': bench_fabric, 'spawned': spawned}


def time_call(fn, repeat, budget=None):
    """ms of up to ``repeat`` calls; fewer (at least one) once ``budget``
    seconds are spent, so a pass that takes minutes is timed once."""
    times = []
    spent = 0.0
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        took = time.perf_counter() - began
        times.append(took * 1000.0)
        spent += took
        if budget is not None and spent >= budget:
            break
    return times


def percentile(values, pct):
    ordered = sorted(values)
    k = min(len(ordered) - 1, int(math.ceil(pct / 100.0 * len(ordered))) - 1)
    return ordered[max(0, k)]


class Api(object):
    """The REST API's WSGI application in this process (noauth)."""

    def __init__(self):
        from composable.api import app as api_app
        self.app = api_app.setup_app('noauth')

    def get(self, path, project='admin-project',
            roles='admin,member,reader'):
        import webob
        req = webob.Request.blank(path, headers={
            'X-Project-Id': project, 'X-Roles': roles,
            'X-User-Id': 'user-bench',
            'OpenStack-API-Version': 'composable latest'})
        resp = req.get_response(self.app)
        if resp.status_int != 200:
            raise RuntimeError('GET %s: %s %s' % (path, resp.status,
                                                  resp.text[:300]))
        return json.loads(resp.body)

    def timed(self, requests, path, **kwargs):
        times = []
        for _ in range(requests):
            began = time.perf_counter()
            self.get(path, **kwargs)
            times.append((time.perf_counter() - began) * 1000.0)
        return times


def _last_page_marker(page_size):
    """The uuid after which the last page of live leases starts (by
    creation, as the list sorts), read as ids alone: an API process holds
    no list of every live lease, and neither does its measure."""
    from composable.common import context as ctx_mod
    from composable.common import states
    from composable.db import api as db_api
    from composable.db import models
    admin = ctx_mod.get_admin_context()
    with db_api.reader(admin) as session:
        query = session.query(models.Lease.uuid).filter(
            models.Lease.status != states.RELEASED)
        live = query.count()
        row = query.order_by(models.Lease.created_at.desc(),
                             models.Lease.id.desc()).offset(
            min(page_size, live - 1)).first()
    return row[0], live


def api_measures(api, info, requests, page_size):
    """{name: [ms]} of the list pages and the detail."""
    marker, live = _last_page_marker(page_size)
    base = '/v1/leases?all_projects=true&limit=%d' % page_size
    out = {}
    page = api.get(base + '&marker=' + marker)['leases']
    if len(page) != min(page_size, live - 1):
        raise RuntimeError('the last page holds %d leases' % len(page))
    out['list_first'] = api.timed(requests, base)
    out['list_filtered'] = api.timed(
        requests, '/v1/leases?status=bound&limit=%d' % page_size,
        project='project-007', roles='member,reader')
    out['list_last'] = api.timed(requests, base + '&marker=' + marker)
    history = info['history_lease']
    got = api.get('/v1/leases/%s/actions' % history)['actions']
    if len(got) != info['history_actions']:
        raise RuntimeError('the lease shows %d actions of %d' % (
            len(got), info['history_actions']))
    out['lease_detail'] = api.timed(requests, '/v1/leases/%s' % history)
    out['lease_actions'] = api.timed(requests,
                                     '/v1/leases/%s/actions' % history)
    return out


def measure_api(db_url, info, requests=40, page_size=50):
    """The API's measures in this process, made as an API process is:
    the application built, then what it made frozen out of the cyclic
    collector (composable-api and the WSGI module do the same), then
    the requests. {'api': {...}, 'gc_max_ms': the longest collection
    during the requests}."""
    import gc
    configure(db_url)
    from composable.common import service
    api = Api()
    api.get('/v1/leases?limit=1')
    service.freeze_startup_objects()
    pauses = []

    def timed_gc(phase, _info):
        if phase == 'start':
            timed_gc.began = time.perf_counter()
        else:
            pauses.append((time.perf_counter() - timed_gc.began) * 1000.0)

    gc.callbacks.append(timed_gc)
    try:
        out = api_measures(api, info, requests, page_size)
    finally:
        gc.callbacks.remove(timed_gc)
    return {'api': out, 'gc_max_ms': max(pauses) if pauses else 0.0}


def rss_kb(field='VmRSS'):
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith(field + ':'):
                return int(line.split()[1])
    return 0


def measure(db_url, info, repeat=5, requests=40, page_size=50,
            only=None, budget=None):
    """Every measure on a filled database, in this process: {'passes':
    {name: {'ms': [...], 'interval': s}}, 'api': {...}, 'rss_mb': ...}."""
    configure(db_url)
    import gc
    gc.collect()
    rss_before = rss_kb()
    table, fakes = passes()
    result = {'passes': {}, 'api': {}, 'load': load_average()}
    for name, (fn, interval) in table.items():
        if only and name not in only:
            continue
        calls = (fakes['placement'].calls, fakes['agents'].calls)
        times = time_call(fn, repeat, budget)
        result['passes'][name] = {
            'ms': times, 'interval': interval,
            # What a real Placement and real agents would be asked per
            # pass (answered at once here).
            'placement_calls': (fakes['placement'].calls - calls[0]) /
            len(times),
            'agent_calls': (fakes['agents'].calls - calls[1]) / len(times)}
    result['rss_mb'] = rss_kb('VmHWM') / 1024.0
    result['rss_growth_mb'] = (rss_kb('VmHWM') - rss_before) / 1024.0
    result['acted_on'] = list(fakes['spawned'])
    result['agent_calls'] = fakes['agents'].calls
    result['placement_writes'] = fakes['placement'].writes
    result['fabric_discoveries'] = fakes['fabric'].calls
    result['load_after'] = load_average()
    return result


# ---------------------------------------------------------------- report

def exponent(sizes, values):
    """Least-squares slope of log(value) on log(size)."""
    pts = [(math.log(s), math.log(max(v, 1e-3)))
           for s, v in zip(sizes, values)]
    if len(pts) < 2:
        return float('nan')
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den if den else 0.0


def report(results, out=sys.stdout):
    """Print the table and the summary line; True when every target is
    met at the largest N."""
    sizes = sorted(results)
    top = results[sizes[-1]]
    rows = []
    for name, spec in top['passes'].items():
        runs = min(len(results[s]['passes'][name]['ms']) for s in sizes)
        rows.append(('pass %s (%d+ runs)' % (name, runs), 'median ms', [
            statistics.median(results[s]['passes'][name]['ms'])
            for s in sizes], spec['interval'] * 1000.0 / 10))
    if not top.get('api'):
        raise ValueError('no API measures: run measure_api as well')
    for name in top['api']:
        for pct in (50, 99):
            target = LIST_P99_TARGET_MS if (
                pct == 99 and name.startswith('list')) else None
            rows.append(('api %s' % name, 'p%d ms' % pct, [
                percentile(results[s]['api'][name], pct) for s in sizes],
                target))
    if 'gc_max_ms' in top:
        rows.append(('api longest gc collection', 'ms',
                     [results[s].get('gc_max_ms', 0.0) for s in sizes],
                     None))
    rows.append(('conductor rss', 'peak MiB',
                 [results[s]['rss_mb'] for s in sizes], None))
    width = 34
    print('%-*s %-10s %s %8s %7s %s' % (
        width, 'measure', 'unit', ' '.join('%11s' % ('N=%d' % s)
                                           for s in sizes),
        'target', 'exp', 'ok'), file=out)
    summary = []
    ok_all = True
    for label, unit, values, target in rows:
        exp = exponent(sizes, values)
        ok = True
        if target is not None and values[-1] > target:
            ok = False
        if label not in ('conductor rss', 'api longest gc collection') and \
                exp > EXPONENT_TARGET and \
                values[-1] > 5.0:
            # Below a few ms a slope is noise, not growth.
            ok = False
        ok_all = ok_all and ok
        print('%-*s %-10s %s %8s %7.2f %s' % (
            width, label, unit, ' '.join('%11.1f' % v for v in values),
            '%.0f' % target if target else '-', exp,
            'yes' if ok else 'NO'), file=out)
        key = label.split(' (')[0].replace('pass ', '').replace(
            'api ', '').replace('conductor rss', 'rss').replace(
            'longest gc collection', 'gc_max')
        if unit.startswith('p50'):
            key += '_p50'
        elif unit.startswith('p99'):
            key += '_p99'
        summary.append('%s_exp=%.2f' % (key.replace(' ', '_'), exp))
    for s in sizes:
        r = results[s]
        asked = ', '.join(
            '%s %d/%d' % (name, figures.get('placement_calls', 0),
                          figures.get('agent_calls', 0))
            for name, figures in r['passes'].items()
            if figures.get('placement_calls') or figures.get('agent_calls'))
        print('N=%d: calls per pass to Placement/agents (fakes): %s' % (
            s, asked or 'none'), file=out)
        print('N=%d: load average %s before, %s after; fill %.0f s; '
              'passes acted on %d lease(s), agents called %d time(s), '
              'Placement written %d time(s)' % (
                  s, r['load'], r['load_after'], r.get('fill_s', 0),
                  len(r['acted_on']), r['agent_calls'],
                  r['placement_writes']), file=out)
    print('scale: %s meets_targets=%s (N=%d)' % (
        ' '.join(summary), 'yes' if ok_all else 'no', sizes[-1]),
        file=out, flush=True)
    return ok_all


# ---------------------------------------------------------------- driver

def _database(db_host):
    import pymysql
    name = 'composable_bench_%s_%s' % (leftovers.run_tag(),
                                       uuid.uuid4().hex[:6])
    root = pymysql.connect(host=db_host, user='root', password='')
    root.cursor().execute('CREATE DATABASE %s CHARACTER SET utf8mb4' % name)
    url = 'mysql+pymysql://root@%s/%s?charset=utf8mb4' % (db_host, name)
    return root, name, url


def run_size(n, args):
    root, name, url = _database(args.db_host)
    try:
        engine = sa.create_engine(url)
        try:
            from composable.db import migration
            migration.upgrade('head', engine=engine)
            began = time.monotonic()
            info = fill(engine, n)
            fill_s = time.monotonic() - began
            with engine.connect() as conn:
                conn.execute(sa.text('ANALYZE TABLE leases, lease_actions, '
                                     'lease_usage, memory_extents, devices,'
                                     ' attachments'))
        finally:
            engine.dispose()
        print('N=%d: filled in %.0f s (%s); load average %s' % (
            n, fill_s, ', '.join('%s=%d' % (k, v) for k, v in info.items()
                                 if isinstance(v, int)), load_average()),
              flush=True)
        # The measures in a process of their own: its RSS is that of a
        # conductor that has run every pass, not of the fill.
        child = subprocess.run(
            [sys.executable, os.path.abspath(__file__), '--measure', url,
             '--info', json.dumps(info), '--repeat', str(args.repeat),
             '--requests', str(args.requests),
             '--page-size', str(args.page_size),
             '--pass-budget', str(args.pass_budget)],
            stdout=subprocess.PIPE, check=True, timeout=6 * 3600)
        result = json.loads(child.stdout.decode().strip().splitlines()[-1])
        # The API in a process of its own, as it runs: a conductor's
        # passes leave nothing in it to walk or to hold.
        child = subprocess.run(
            [sys.executable, os.path.abspath(__file__), '--measure-api',
             url, '--info', json.dumps(info),
             '--requests', str(args.requests),
             '--page-size', str(args.page_size)],
            stdout=subprocess.PIPE, check=True, timeout=3600)
        result.update(json.loads(
            child.stdout.decode().strip().splitlines()[-1]))
        result['fill_s'] = fill_s
        return result
    finally:
        root.cursor().execute('DROP DATABASE IF EXISTS %s' % name)
        root.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--sizes', default='1000,10000,100000',
                        help='numbers of leases, comma separated')
    parser.add_argument('--quick', action='store_true',
                        help='1,000 and 10,000 leases only')
    parser.add_argument('--repeat', type=int, default=5,
                        help='runs of each pass (the median is shown)')
    parser.add_argument('--requests', type=int, default=40,
                        help='requests of each API measure')
    parser.add_argument('--page-size', type=int, default=50,
                        help='limit of the list pages')
    parser.add_argument('--pass-budget', type=float, default=30,
                        help='seconds after which a pass is not run again '
                             '(a pass that takes longer is timed once)')
    parser.add_argument('--db-host', default='127.0.0.1')
    parser.add_argument('--json', help='also write the figures here')
    parser.add_argument('--report', metavar='JSON',
                        help='print the table of figures written by --json '
                             'and exit')
    parser.add_argument('--measure', help=argparse.SUPPRESS)
    parser.add_argument('--measure-api', help=argparse.SUPPRESS)
    parser.add_argument('--info', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        result = measure(args.measure, json.loads(args.info), args.repeat,
                         args.requests, args.page_size,
                         budget=args.pass_budget)
        print(json.dumps(result), flush=True)
        return 0
    if args.measure_api:
        result = measure_api(args.measure_api, json.loads(args.info),
                             args.requests, args.page_size)
        print(json.dumps(result), flush=True)
        return 0
    if args.report:
        with open(args.report) as f:
            results = {int(k): v for k, v in json.load(f).items()}
        return 0 if report(results) else 1
    sizes = [1000, 10000] if args.quick else [
        int(s) for s in args.sizes.split(',') if s.strip()]
    print('scale: N=%s leases; the agents, Placement and the fabric are '
          'in-process fakes answering at once (BenchAgents, BenchPlacement,'
          ' BenchFabric): the figures are composable\'s own '
          'work and queries on MariaDB; load average %s' % (
              ','.join(map(str, sizes)), load_average()), flush=True)
    results = {}
    for n in sizes:
        results[n] = run_size(n, args)
        if args.json:
            # After each size: a long run cut short keeps what it got.
            with open(args.json, 'w') as f:
                json.dump({str(k): v for k, v in results.items()}, f)
    return 0 if report(results) else 1


if __name__ == '__main__':
    if '--measure' in sys.argv:
        sys.exit(main())
    # Whatever the run leaves on the machine (its databases above all)
    # fails it, and is removed.
    with leftovers.guard():
        rc = main()
    sys.exit(rc)
