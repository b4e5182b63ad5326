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

"""Stacks of OS::Composable::Lease as users drive them: the real
``openstack stack ...`` commands (python-openstackclient and
python-heatclient), authenticated by Keystone through ``OS_*`` variables,
against real heat-api and heat-engine processes that load composable's
plugin from ``plugin_dirs``, and a real composable
(tests/heat_functional/cloud.py). What the stacks did is checked in
composable itself, through its API, with the user's own token.
"""

import concurrent.futures
import datetime
import json
import os
import subprocess
import sys
import uuid

import yaml

from composable.heat import lease as lease_mod
from tests.functional.keystone import servers

# The openstack command of this environment; while a command waits for a
# stack action (--wait), heatclient reads the events every second rather
# than every five (see openstack_cli.py).
OPENSTACK = [sys.executable,
             os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          'openstack_cli.py')]
REPO = servers.REPO
SAMPLE = os.path.join(REPO, 'etc', 'heat', 'composable-leases.yaml')
USER = 'alpha-member'
OTHER_USER = 'beta-member'
# Seconds one openstack command may take on a busy machine: it loads
# every plugin it has, and --wait lasts as long as the stack action.
COMMAND_TIMEOUT = 600
# Seconds Heat may take for a stack action (heatclient's --wait has no
# limit of its own; the command's timeout is the limit).
STACK_TIMEOUT = 480


def _in(days):
    return (datetime.datetime.utcnow().replace(microsecond=0) +
            datetime.timedelta(days=days)).strftime('%Y-%m-%dT%H:%M:%SZ')


def _same_time(a, b):
    def parse(value):
        value = value.replace('Z', '+00:00')
        parsed = datetime.datetime.fromisoformat(value)
        if parsed.tzinfo is not None:
            parsed = parsed.astimezone(datetime.timezone.utc).replace(
                tzinfo=None)
        return parsed
    return parse(a) == parse(b)


def openstack(cloud, *args, user=USER, check=True, as_json=True):
    """Runs ``openstack ARGS`` as ``user``; the parsed JSON output (or
    the completed process when ``as_json`` is false)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith('OS_')}
    env.update(cloud.os_variables(user))
    argv = OPENSTACK + list(args) + (['-f', 'json'] if as_json else [])
    proc = subprocess.run(argv, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=COMMAND_TIMEOUT)
    if check and proc.returncode != 0:
        raise AssertionError('%s exited with %s:\n%s\n%s\n%s' % (
            ' '.join(args), proc.returncode, proc.stdout, proc.stderr,
            cloud.logs()))
    if not as_json:
        return proc
    return json.loads(proc.stdout)


def _stack_name(prefix):
    return '%s-%s' % (prefix, uuid.uuid4().hex[:6])


def _resources(cloud, stack):
    """{resource name: resource} of ``stack``."""
    return {r['resource_name']: r for r in openstack(
        cloud, 'stack', 'resource', 'list', stack)}


def _pools(client):
    return {p['name']: p for p in client.get('/pools').json()['pools']}


def _live_leases(client):
    return [lease for lease in client.get('/leases').json()['leases']
            if lease['status'] != 'released']


def _delete_stack(cloud, name):
    proc = openstack(cloud, 'stack', 'delete', '--yes', '--wait', name,
                     check=False, as_json=False)
    assert proc.returncode == 0, '%s\n%s\n%s' % (proc.stdout, proc.stderr,
                                                 cloud.logs())
    listed = openstack(cloud, 'stack', 'list')
    assert name not in [s['Stack Name'] for s in listed]


def _template(tmp_path, name, resources):
    path = tmp_path / ('%s.yaml' % name)
    path.write_text(yaml.safe_dump({
        'heat_template_version': '2021-04-16',
        'resources': {
            res: {'type': 'OS::Composable::Lease', 'properties': props}
            for res, props in resources.items()}}))
    return str(path)


def test_resource_type_show_renders_the_plugin_documentation(cloud):
    # The type's name is a regular expression matched at the start.
    listed = openstack(cloud, 'orchestration', 'resource', 'type', 'list',
                       '--long', '--filter', 'name=OS::Composable')
    assert [t['Resource Type'] for t in listed] == ['OS::Composable::Lease']
    # heat-api ignores "show --long" (with_description is not passed on
    # to the engine): the list gives the class's documentation.
    assert listed[0]['Description'].startswith(
        lease_mod.Lease.__doc__.strip().split('\n')[0])

    shown = openstack(cloud, 'orchestration', 'resource', 'type', 'show',
                      'OS::Composable::Lease')
    assert shown['resource_type'] == 'OS::Composable::Lease'
    assert shown['support_status']['message'] == \
        lease_mod.Lease.support_status.message
    schema = lease_mod.Lease.properties_schema
    assert set(shown['properties']) == set(schema)
    for name, prop in schema.items():
        rendered = shown['properties'][name]
        assert rendered['description'] == prop.description, name
        assert rendered['update_allowed'] == prop.update_allowed, name
        assert rendered['type'] == prop.type.lower(), name
    assert shown['properties']['pools']['schema']['*']['constraints'] == [
        {'custom_constraint': 'composable.pool'}]
    attributes = lease_mod.Lease.attributes_schema
    assert set(attributes) <= set(shown['attributes'])
    for name, attr in attributes.items():
        assert shown['attributes'][name]['description'] == \
            attr.description, name

    hot = openstack(cloud, 'orchestration', 'resource', 'type', 'show',
                    '--template-type', 'hot', 'OS::Composable::Lease')
    lease_res = hot['resources']['Lease']
    assert lease_res['type'] == 'OS::Composable::Lease'
    assert lease_res['properties'] == {
        name: {'get_param': name} for name in schema}
    assert set(hot['parameters']) == set(schema)
    assert hot['parameters']['memory']['description'] == \
        schema['memory'].description
    assert set(hot['outputs']) >= set(attributes)


def test_sample_template_create_update_suspend_resume_delete(
        cloud, tmp_path):
    user = cloud.user_client(USER)
    before = _pools(user)
    name = _stack_name('leases')
    end = _in(30)
    try:
        openstack(cloud, 'stack', 'create', '--wait', '-t', SAMPLE,
                  '--parameter', 'host=compute-0',
                  '--parameter', 'end=%s' % end, name, as_json=False)
        created = openstack(cloud, 'stack', 'show', name)
        assert created['stack_status'] == 'CREATE_COMPLETE', created
        resources = _resources(cloud, name)
        assert {r['resource_status'] for r in resources.values()} == {
            'CREATE_COMPLETE'}
        memory_id = resources['memory_lease']['physical_resource_id']
        gpu_id = resources['gpu_lease']['physical_resource_id']

        # The leases are composable's, in the user's project.
        memory = user.get('/leases/%s' % memory_id).json()
        assert memory['status'] == 'reserved', memory
        assert memory['memory_mb'] == 2048
        assert _same_time(memory['end_at'], end)
        assert sum(e['size_mb'] for e in memory['extents']) == 2048
        gpu = user.get('/leases/%s' % gpu_id).json()
        assert gpu['status'] == 'bound', gpu
        assert gpu['host'] == 'compute-0'
        assert [d['model'] for d in gpu['devices']] == ['FakeGPU-16G']
        pools = _pools(user)
        assert pools['memory-pool']['used'] == \
            before['memory-pool']['used'] + 2048
        assert pools['gpu-pool']['used'] == before['gpu-pool']['used'] + 1
        # ... and another project's users do not see them.
        other = cloud.user_client(OTHER_USER)
        other.get('/leases/%s' % memory_id, expect=404)
        other.get('/leases/%s' % gpu_id, expect=404)

        outputs = {o['output_key']: o['output_value'] for o in openstack(
            cloud, 'stack', 'output', 'show', '--all', name).values()
            for o in [json.loads(o) if isinstance(o, str) else o]}
        assert outputs['memory_lease']['id'] == memory_id
        assert outputs['gpu_lease']['host'] == 'compute-0'
        assert outputs['gpu_lease']['status'] == 'bound'

        # A later end changes both leases in place.
        later = _in(60)
        openstack(cloud, 'stack', 'update', '--wait', '--existing',
                  '--parameter', 'end=%s' % later, name, as_json=False)
        updated = openstack(cloud, 'stack', 'show', name)
        assert updated['stack_status'] == 'UPDATE_COMPLETE', updated
        resources = _resources(cloud, name)
        assert resources['memory_lease']['physical_resource_id'] == \
            memory_id
        assert resources['gpu_lease']['physical_resource_id'] == gpu_id
        memory = user.get('/leases/%s' % memory_id).json()
        gpu = user.get('/leases/%s' % gpu_id).json()
        assert _same_time(memory['end_at'], later), memory
        assert _same_time(gpu['end_at'], later), gpu
        assert (memory['status'], gpu['status']) == ('reserved', 'bound')
        actions = [a['action'] for a in user.get(
            '/leases/%s/actions' % gpu_id).json()['actions']]
        assert 'unbind' not in actions and 'delete' not in actions

        # Suspending unbinds the bound lease and keeps its capacity;
        # resuming binds it to its host again; check finds both as they
        # should be.
        openstack(cloud, 'stack', 'suspend', '--wait', name, as_json=False)
        assert openstack(cloud, 'stack', 'show', name)['stack_status'] == \
            'SUSPEND_COMPLETE'
        gpu = user.get('/leases/%s' % gpu_id).json()
        assert gpu['status'] == 'reserved', gpu
        assert _pools(user)['gpu-pool']['used'] == \
            before['gpu-pool']['used'] + 1
        openstack(cloud, 'stack', 'resume', '--wait', name, as_json=False)
        assert openstack(cloud, 'stack', 'show', name)['stack_status'] == \
            'RESUME_COMPLETE'
        gpu = user.get('/leases/%s' % gpu_id).json()
        assert (gpu['status'], gpu['host']) == ('bound', 'compute-0'), gpu
        openstack(cloud, 'stack', 'check', '--wait', name, as_json=False)
        assert openstack(cloud, 'stack', 'show', name)['stack_status'] == \
            'CHECK_COMPLETE'
    finally:
        _delete_stack(cloud, name)

    # Nothing of the stack is left in composable.
    for lease_id in (memory_id, gpu_id):
        resp = user.request('GET', '/leases/%s' % lease_id)
        assert resp.status_code == 404 or \
            resp.json()['status'] == 'released', resp.text
    assert not [lease for lease in _live_leases(user)
                if lease['uuid'] in (memory_id, gpu_id)]
    pools = _pools(user)
    assert pools['memory-pool']['used'] == before['memory-pool']['used']
    assert pools['gpu-pool']['used'] == before['gpu-pool']['used']


def test_elastic_lease_create_update_in_place_replace_and_delete(
        cloud, tmp_path):
    user = cloud.user_client(USER)
    # The elastic policy is shown from microversion 1.2 on.
    user.headers['OpenStack-API-Version'] = 'composable 1.2'
    before = _pools(user)['memory-pool']['used']
    name = _stack_name('elastic')
    end, later = _in(30), _in(60)
    policy = {'min_mb': 1024, 'max_mb': 4096, 'headroom': 0.5}

    def template(elastic, ends):
        return _template(tmp_path, '%s-%s' % (name, uuid.uuid4().hex[:4]), {
            'mem': {'memory': 2048, 'elastic': elastic, 'end': ends}})

    first_id = second_id = None
    try:
        openstack(cloud, 'stack', 'create', '--wait', '-t',
                  template(policy, end), name, as_json=False)
        assert openstack(cloud, 'stack', 'show', name)['stack_status'] == \
            'CREATE_COMPLETE'
        first_id = _resources(cloud, name)['mem']['physical_resource_id']
        lease = user.get('/leases/%s' % first_id).json()
        assert lease['status'] == 'reserved', lease
        assert lease['elastic'] == {
            'min_mb': 1024, 'max_mb': 4096, 'observation_window': 300,
            'prediction_window': 60, 'headroom': 0.5}
        assert _pools(user)['memory-pool']['used'] == before + 2048
        shown = openstack(cloud, 'stack', 'resource', 'show', name, 'mem')
        attributes = shown['attributes']
        if isinstance(attributes, str):
            attributes = json.loads(attributes)
        assert attributes['elastic']['max_mb'] == 4096
        assert attributes['memory_mb'] == 2048

        # A later end: the same lease, its policy kept.
        openstack(cloud, 'stack', 'update', '--wait', '-t',
                  template(policy, later), name, as_json=False)
        assert openstack(cloud, 'stack', 'show', name)['stack_status'] == \
            'UPDATE_COMPLETE'
        assert _resources(cloud, name)['mem']['physical_resource_id'] == \
            first_id
        lease = user.get('/leases/%s' % first_id).json()
        assert _same_time(lease['end_at'], later), lease
        assert lease['elastic']['max_mb'] == 4096

        # New limits: the API does not change them on a lease, so the
        # stack gets a new lease and the old one is released.
        wider = dict(policy, max_mb=8192)
        openstack(cloud, 'stack', 'update', '--wait', '-t',
                  template(wider, later), name, as_json=False)
        assert openstack(cloud, 'stack', 'show', name)['stack_status'] == \
            'UPDATE_COMPLETE'
        second_id = _resources(cloud, name)['mem']['physical_resource_id']
        assert second_id != first_id
        assert user.get('/leases/%s' % second_id).json()['elastic'][
            'max_mb'] == 8192
        assert [lease['uuid'] for lease in _live_leases(user)
                if lease['uuid'] in (first_id, second_id)] == [second_id]
    finally:
        _delete_stack(cloud, name)

    for lease_id in (first_id, second_id):
        if lease_id is None:
            continue
        resp = user.request('GET', '/leases/%s' % lease_id)
        assert resp.status_code == 404 or \
            resp.json()['status'] == 'released', resp.text
    assert _pools(user)['memory-pool']['used'] == before


def test_sriov_lease_create_bind_in_place_and_delete(cloud, tmp_path):
    """A lease of a pool of SR-IOV virtual functions (made by the cloud's
    admin) through a stack: created naming the pool only (the lease asks
    for the pool's kind of device), then a later end and the pool's host
    in place (the same lease, now bound), then deleted: the VF goes back
    to the pool."""
    admin = cloud.admin_client()
    admin.headers['OpenStack-API-Version'] = 'composable 1.3'
    user = cloud.user_client(USER)
    suffix = uuid.uuid4().hex
    pool = 'vfs-%s' % suffix[:6]
    # A physical function of its own: one pool per PF.
    admin.post('/pools', {
        'name': pool, 'kind': 'pci', 'fabric': 'fabric-0',
        'device_class': 'NIC', 'sriov': {
            'host': 'compute-0',
            'pf_address': '0000:%s:%s.0' % (suffix[6:8], suffix[8:10]),
            'vf_count': 2}}, expect=201)
    name = _stack_name('sriov')
    end, later = _in(30), _in(60)

    def template(**extra):
        props = dict({'device_count': 1, 'pools': [pool], 'end': end},
                     **extra)
        return _template(tmp_path, '%s-%s' % (name, uuid.uuid4().hex[:4]),
                         {'vf': props})

    lease_id = None
    try:
        try:
            # With --wait, the command fails unless the stack completes.
            openstack(cloud, 'stack', 'create', '--wait', '-t', template(),
                      name, as_json=False)
            lease_id = _resources(cloud, name)['vf']['physical_resource_id']
            lease = user.get('/leases/%s' % lease_id).json()
            assert (lease['status'], lease['device_kind']) == (
                'reserved', 'nic'), lease
            assert [d['kind'] for d in lease['devices']] == ['nic'], lease
            assert _pools(user)[pool]['used'] == 1

            # A later end and the pool's host: changed in place, bound.
            openstack(cloud, 'stack', 'update', '--wait', '-t',
                      template(end=later, host='compute-0'), name,
                      as_json=False)
            # The same lease (a replaced one would be released).
            lease = user.get('/leases/%s' % lease_id).json()
            assert (lease['status'], lease['host']) == (
                'bound', 'compute-0'), lease
            assert _same_time(lease['end_at'], later), lease
        finally:
            _delete_stack(cloud, name)
        if lease_id is not None:
            resp = user.request('GET', '/leases/%s' % lease_id)
            assert resp.status_code == 404 or \
                resp.json()['status'] == 'released', resp.text
        assert _pools(user)[pool]['used'] == 0
    finally:
        admin.delete('/pools/%s' % pool)


def test_more_memory_than_the_pool_holds_fails_with_composables_message(
        cloud, tmp_path):
    user = cloud.user_client(USER)
    capacity = _pools(user)['memory-pool']['total']
    leases_before = _live_leases(user)
    name = _stack_name('too-big')
    template = _template(tmp_path, name, {
        'big': {'memory': capacity * 2, 'pools': ['memory-pool']}})
    # What composable answers to that request, made directly.
    refused = user.post('/leases', {'memory_mb': capacity * 2,
                                    'pools': ['memory-pool']}, expect=400)
    message = refused.json()['errors'][0]['detail']
    assert 'memory-pool' in message
    try:
        proc = openstack(cloud, 'stack', 'create', '--wait', '-t', template,
                         name, check=False, as_json=False)
        assert proc.returncode != 0, proc.stdout
        shown = openstack(cloud, 'stack', 'show', name)
        assert shown['stack_status'] == 'CREATE_FAILED', shown
        assert message in shown['stack_status_reason'], shown
        big = _resources(cloud, name)['big']
        assert big['resource_status'] == 'CREATE_FAILED'
        # Refused before it was made: the resource has no lease.
        assert not big['physical_resource_id']
    finally:
        _delete_stack(cloud, name)
    assert _live_leases(user) == leases_before


def test_two_stacks_racing_for_the_same_memory(cloud, tmp_path):
    """Two stacks asking, together, more than the pool has left: one is
    created, the other fails with composable's message; the pool is never
    over-committed and both deletes leave nothing."""
    user = cloud.user_client(USER)
    pool = _pools(user)['memory-pool']
    free = pool['total'] - pool['used']
    step = pool['step_size']
    # More than half of what is free, in whole steps: both cannot fit.
    each = (free // 2 // step + 1) * step
    names = [_stack_name('race') for _ in range(2)]
    templates = [_template(tmp_path, n, {'mem': {'memory': each}})
                 for n in names]
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool_:
            procs = list(pool_.map(
                lambda nt: openstack(cloud, 'stack', 'create', '--wait',
                                     '-t', nt[1], nt[0], check=False,
                                     as_json=False),
                zip(names, templates)))
        # Both stacks have ended (--wait): what one show says of each
        # stays true.
        shown = {n: openstack(cloud, 'stack', 'show', n) for n in names}
        statuses = sorted(s['stack_status'] for s in shown.values())
        assert statuses == ['CREATE_COMPLETE', 'CREATE_FAILED'], (
            statuses, [p.stderr for p in procs])
        after = _pools(user)['memory-pool']
        assert after['used'] == pool['used'] + each
        assert after['used'] <= after['total']
        failed = [n for n in names
                  if shown[n]['stack_status'] == 'CREATE_FAILED'][0]
        lease_id = _resources(cloud, failed)['mem']['physical_resource_id']
        lease = user.get('/leases/%s' % lease_id).json()
        assert lease['status'] == 'alloc_failed'
        assert lease['fault'] in shown[failed]['stack_status_reason']
    finally:
        for n in names:
            _delete_stack(cloud, n)
    assert _pools(user)['memory-pool']['used'] == pool['used']


def test_no_secret_reaches_a_log(cloud):
    """After the stacks above: no password, token or Heat's encryption
    key in any log of Heat or composable."""
    secrets = {
        'password': servers.PASSWORD,
        'admin password': servers.ADMIN_PASSWORD,
        'auth_encryption_key': cloud.heat.auth_encryption_key,
        'user token': cloud.keystone.user_token(USER),
    }
    logs = cloud.log_files()
    assert any(path.endswith('heat-engine.log') for path in logs)
    for path in logs:
        with open(path, errors='replace') as f:
            text = f.read()
        for what, value in secrets.items():
            assert value not in text, '%s in %s' % (what, path)
