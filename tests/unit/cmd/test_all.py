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

"""composable-all: the demo inventory, and the whole service in a child
process answering HTTP and stopping on SIGTERM."""

import os
import signal
import socket
import subprocess
import sys
import time

import requests

from composable.cmd import all as cmd_all
from composable.common import states
from composable.conductor.allocator import claims as allocator
from composable.conductor import fabric_sync
from composable import conf
from composable.db import api as db_api
from composable import fabric as fabric_drivers
from composable.fabric import fake
from tests.unit.conductor import harness as h_mod


def test_demo_inventory_is_found_and_loaded_once(sqlite_db):
    path = cmd_all.find_inventory()
    assert path and path.endswith('demo-inventory.yaml')
    ctx = h_mod.admin()
    assert cmd_all.load_inventory(ctx, path) == 10
    assert cmd_all.load_inventory(ctx, path) == 0
    assert db_api.fabric_get(ctx, 'demo-fabric').driver == 'fake'
    hosts = {h.name for h in db_api.host_list(ctx)}
    assert hosts == {'compute-0', 'compute-1'}
    node = db_api.memory_node_get(ctx, 'memory-0')
    assert node.capacity_mb == 16384
    assert db_api.pool_get(ctx, 'memory-pool').total == 16384
    gpus = db_api.device_list(ctx)
    assert len(gpus) == 4
    assert {d.model for d in gpus} == {'FakeGPU-16G'}
    assert db_api.pool_get(ctx, 'gpu-pool').total == 4


def test_demo_keeps_its_gpus_through_fabric_syncs_and_restarts(sqlite_db):
    """The conductor's fabric-sync loop (every [conductor]
    fabric_sync_interval seconds, 600 by default) run on the demo
    inventory, as composable-all runs it: the simulated fabric has no
    inventory to discover, which must not read as "every GPU vanished"."""
    conf.CONF.set_override('enabled_drivers', ['fake'], 'fabric')
    fabric_drivers.reset()
    fake.FakeFabricDriver.reset()
    try:
        ctx = h_mod.admin()
        path = cmd_all.find_inventory()
        cmd_all.load_inventory(ctx, path)
        assert conf.CONF.conductor.fabric_sync_interval > 0
        for restart in range(2):
            # What the 'fabric-sync' loop of ConductorManager.start calls.
            summary = fabric_sync.FabricSync(conf.CONF.host).run()
            assert summary['demo-fabric']['gone'] == []
            gpus = db_api.device_list(ctx)
            assert {d.state for d in gpus} == {states.DEVICE_AVAILABLE}
            pool = db_api.pool_get(ctx, 'gpu-pool')
            assert (pool.total, pool.used) == (4, 0)
            # A restart registers the inventory again (nothing new).
            assert cmd_all.load_inventory(ctx, path) == 0
        uuid, status = allocator.create_and_allocate(
            ctx, {'project_id': 'demo', 'device_kind': 'gpu',
                  'device_count': 1})
        assert status == states.RESERVED
        # Held by a lease, a device is still left alone by the sync.
        fabric_sync.FabricSync(conf.CONF.host).run()
        pool = db_api.pool_get(ctx, 'gpu-pool')
        assert (pool.total, pool.used) == (4, 1)
    finally:
        fake.FakeFabricDriver.reset()
        fabric_drivers.reset()
        conf.CONF.clear_override('enabled_drivers', 'fabric')


def _free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def test_composable_all_serves_and_stops(tmp_path):
    port = _free_port()
    config = tmp_path / 'all.conf'
    config.write_text(
        '[DEFAULT]\nhost = all-test\n'
        '[database]\nconnection = sqlite:///%s\n'
        '[api]\nport = %d\n' % (tmp_path / 'all.sqlite', port))
    out = open(tmp_path / 'out.log', 'wb')
    proc = subprocess.Popen(
        [sys.executable, '-c',
         'import sys; from composable.cmd.all import main; '
         'sys.exit(main())', '--config-file', str(config)],
        stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        cwd=str(tmp_path))
    base = 'http://127.0.0.1:%d' % port
    headers = {'X-Project-Id': 'demo'}
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                requests.get(base + '/', timeout=2)
                break
            except requests.ConnectionError:
                assert proc.poll() is None, (tmp_path / 'out.log').read_text()
                assert time.monotonic() < deadline
                time.sleep(0.2)
        lease = requests.post(base + '/v1/leases', headers=headers,
                              json={'memory_mb': 1024, 'device_count': 1},
                              timeout=30).json()
        assert lease['status'] == 'reserved', lease
        resp = requests.post(base + '/v1/leases/%s/bind' % lease['uuid'],
                             headers=headers, json={'host': 'compute-0'},
                             timeout=30)
        assert resp.status_code == 202, resp.text
        deadline = time.monotonic() + 30
        while True:
            lease = requests.get(base + '/v1/leases/%s' % lease['uuid'],
                                 headers=headers, timeout=30).json()
            if lease['status'] not in ('binding',):
                break
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert lease['status'] == 'bound', lease
        # The demo samples (simulated) usage every few seconds: points
        # within a minute of the bind.
        deadline = time.monotonic() + 60
        while True:
            resp = requests.get(
                base + '/v1/leases/%s/usage' % lease['uuid'],
                headers=dict(headers, **{
                    'OpenStack-API-Version': 'composable 1.1'}),
                timeout=30)
            assert resp.status_code == 200, resp.text
            samples = resp.json()['usage']
            if samples:
                break
            assert time.monotonic() < deadline, 'no usage samples'
            time.sleep(0.5)
        assert 0 < samples[0]['used_mb'] <= samples[0]['size_mb'] == 1024
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        out.close()
    log = (tmp_path / 'out.log').read_text()
    assert ('composable-all listening on http://127.0.0.1:%d (fabric '
            'demo-fabric is SIMULATED)' % port) in log
    assert code == 0, log
    assert os.path.exists(tmp_path / 'all.sqlite')
    assert 'SIMULATED usage' in log


def test_demo_defaults_sample_often_unless_configured(tmp_path):
    from oslo_config import cfg

    from composable.conf import compute
    from composable.conf import elastic

    def parsed(*args):
        conf_ = cfg.ConfigOpts()
        compute.register_opts(conf_)
        elastic.register_opts(conf_)
        conf_(list(args), project='composable', default_config_files=[],
              default_config_dirs=[])
        return conf_

    production = parsed()
    assert production.compute_node.usage_report_interval == 60
    assert production.compute_node.simulated_usage is False
    assert production.elastic.sample_interval == 60
    demo = parsed()
    cmd_all.apply_demo_defaults(demo)
    assert demo.compute_node.usage_report_interval == 5
    assert demo.compute_node.simulated_usage is True
    assert demo.elastic.sample_interval == 5
    assert demo.elastic.resize_interval == 5
    assert demo.elastic.shrink_hysteresis == 30
    config = tmp_path / 'demo.conf'
    config.write_text('[compute_node]\nusage_report_interval = 20\n'
                      'simulated_usage = false\n')
    chosen = parsed('--config-file', str(config))
    cmd_all.apply_demo_defaults(chosen)
    assert chosen.compute_node.usage_report_interval == 20
    assert chosen.compute_node.simulated_usage is False
    assert chosen.elastic.sample_interval == 5


def test_standalone_auth_strategy_is_noauth_unless_configured(tmp_path):
    from oslo_config import cfg

    from composable.conf import default

    def parsed(*args):
        conf = cfg.ConfigOpts()
        default.register_opts(conf)
        conf(list(args), project='composable', default_config_files=[],
             default_config_dirs=[])
        return conf

    # The option's default (keystone) is for a deployed API.
    conf = parsed()
    assert conf.auth_strategy == 'keystone'
    assert cmd_all.standalone_auth_strategy(conf) == 'noauth'
    config = tmp_path / 'keystone.conf'
    config.write_text('[DEFAULT]\nauth_strategy = keystone\n')
    assert cmd_all.standalone_auth_strategy(
        parsed('--config-file', str(config))) == 'keystone'
    config.write_text('[DEFAULT]\nauth_strategy = noauth\n')
    assert cmd_all.standalone_auth_strategy(
        parsed('--config-file', str(config))) == 'noauth'
