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

"""No secret ever leaves where it belongs, with DEBUG logging everywhere.

The real processes (API, conductor, a memory agent exporting through the
machine's tgtd, a compute agent hot-plugging into the tiny TCG guest), all
with ``debug = true``, run:

- a memory lease's whole life cycle with CHAP (created, bound to the
  guest, unbound, bound again, deleted), the CHAP secrets read from the
  database while the lease holds them;
- a device lease on a fabric whose ``driver_info`` holds a password
  (created, bound to a host, unbound, bound again while the fabric fails,
  so that a fault is written, deleted).

Then no secret appears in any line of any process's log (the privsep
daemons log through their agents), in anything a project member reads
from the API (leases, their actions, pools, devices, faults), nor in the
admin's view of the fabric, which shows the password masked.
"""

import glob
import json
import os
import uuid

import pytest

from tests.functional.compute_node import dataplane
from tests.functional.dataplane import env
from tests.functional.dataplane import test_guest_memory_lease as e2e

LEASE_MB = e2e.LEASE_MB


@pytest.fixture(scope='module')
def sdp(tmp_path_factory, shared_tgt, libvirt_conn):
    stack = env.DataPlaneStack(tmp_path_factory.mktemp('secrets'),
                               shared_tgt)
    stack.stack.extra.setdefault('DEFAULT', {})['debug'] = 'true'
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


def _all_logs(dp):
    text = []
    for path in sorted(glob.glob(os.path.join(dp.workdir, '*.log')) +
                       glob.glob(os.path.join(dp.workdir, '*.out'))):
        with open(path, errors='replace') as f:
            text.append((path, f.read()))
    return text


def _user_reads(dp, lease_uuids):
    """Everything a project member can read that concerns the leases."""
    user = dp.user
    seen = [user.get('/leases').text, user.get('/pools').text]
    for lease_uuid in lease_uuids:
        seen.append(user.get('/leases/%s' % lease_uuid).text)
        seen.append(user.get('/leases/%s/actions' % lease_uuid).text)
    for path in ('/devices', '/fabrics', '/hosts', '/memory_nodes'):
        resp = user.request('GET', path)
        assert resp.status_code in (200, 403), (path, resp.status_code)
        seen.append(resp.text)
    return seen


def _memory_life_cycle(dp, guest, secrets):
    lease = dp.user.post('/leases', {'name': 'chap', 'memory_mb': LEASE_MB,
                                     'attach_mode': 'guest'},
                         expect=201).json()
    for _ in range(2):
        since = guest.mark()
        bound = e2e._bind(dp, lease, guest)
        e2e._guest_swaps_on(guest, bound['extents'][0]['uuid'], LEASE_MB,
                            since)
        [extent] = dp.extent_secrets(lease['uuid'])
        assert extent['chap_username'] and extent['chap_secret']
        secrets.add(extent['chap_secret'])
        # Every bind exports with new credentials.
        dp.user.post('/leases/%s/unbind' % lease['uuid'], {}, expect=202)
        assert dp.user.wait_lease(lease['uuid'], ('reserved', 'error'),
                                  timeout=300)['status'] == 'reserved'
    dp.user.delete('/leases/%s' % lease['uuid'])
    assert dp.user.wait_lease(lease['uuid'], ('released', 'error'),
                              timeout=300)['status'] == 'released'
    return lease['uuid']


def _device_life_cycle(dp, password):
    admin = dp.admin
    admin.post('/fabrics', {'name': 'locked-fabric', 'driver': 'fake',
                            'driver_info': {'username': 'fabric-admin',
                                            'password': password}},
               expect=201)
    admin.post('/hosts', {'name': 'gpu-host', 'fabric': 'locked-fabric',
                          'initiator_iqn': env.INITIATOR + '-gpu'},
               expect=201)
    admin.post('/pools', {'name': 'locked-gpus', 'kind': 'gpu',
                          'fabric': 'locked-fabric'}, expect=201)
    admin.post('/devices', {'pool': 'locked-gpus', 'kind': 'gpu',
                            'address': 'locked-gpu-0',
                            'model': 'FakeGPU-16G'}, expect=201)
    lease = dp.user.post('/leases', {'name': 'gpu', 'device_count': 1,
                                     'pools': ['locked-gpus']},
                         expect=201).json()
    assert lease['status'] == 'reserved', lease
    dp.start_agent('gpu-host', wait=True)
    dp.user.post('/leases/%s/bind' % lease['uuid'], {'host': 'gpu-host'},
                 expect=202)
    bound = dp.user.wait_lease(lease['uuid'], ('bound', 'bind_failed'),
                               timeout=300)
    assert bound['status'] == 'bound', bound['fault']
    dp.user.post('/leases/%s/unbind' % lease['uuid'], {}, expect=202)
    assert dp.user.wait_lease(lease['uuid'], ('reserved', 'error'),
                              timeout=300)['status'] == 'reserved'
    # The fabric fails now: the lease's fault names the fabric.
    admin.request('PATCH', '/fabrics/locked-fabric', json={
        'driver_info': {'username': 'fabric-admin', 'password': password,
                        'simulate_failure': 'bind'}}, expect=200)
    dp.user.post('/leases/%s/bind' % lease['uuid'], {'host': 'gpu-host'},
                 expect=202)
    failed = dp.user.wait_lease(lease['uuid'], ('bound', 'bind_failed'),
                                timeout=300)
    assert failed['status'] == 'bind_failed', failed
    assert 'locked-fabric' in failed['fault']
    dp.user.delete('/leases/%s' % lease['uuid'])
    assert dp.user.wait_lease(lease['uuid'], ('released', 'error'),
                              timeout=300)['status'] == 'released'
    return lease['uuid']


def test_no_secret_in_logs_responses_or_faults(sdp, guest):
    secrets = set()
    password = 'fabric-pw-%s' % uuid.uuid4().hex
    secrets.add(password)
    memory_lease = _memory_life_cycle(sdp, guest, secrets)
    device_lease = _device_life_cycle(sdp, password)
    assert len(secrets) == 3  # two CHAP secrets, one password

    # The logs are at DEBUG and say a lot: the test looks at them.
    logs = _all_logs(sdp)
    assert any('DEBUG' in text for _path, text in logs)
    for path, text in logs:
        for secret in secrets:
            assert secret not in text, (
                'a secret is in %s:\n%s' % (path, '\n'.join(
                    line for line in text.splitlines()
                    if secret in line)[:2000]))

    for text in _user_reads(sdp, [memory_lease, device_lease]):
        for secret in secrets:
            assert secret not in text

    # The admin sees the fabric's credentials masked.
    fabric = sdp.admin.get('/fabrics/locked-fabric').json()
    assert fabric['driver_info']['username'] == 'fabric-admin'
    assert fabric['driver_info']['password'] != password
    assert password not in json.dumps(fabric)
    assert dataplane.domblklist(guest.uuid) == []
