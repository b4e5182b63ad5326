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

"""``openstack composable ...`` as users run it: the real ``openstack``
command, authenticated by the real Keystone through ``OS_*`` variables or
a clouds.yaml, finding the composable API in Keystone's catalog (service
type ``composable``; no endpoint is given)."""

import json
import os
import subprocess
import sys
import time
import uuid

import pytest
import requests
import yaml

from tests.functional.keystone import servers

OPENSTACK = os.path.join(os.path.dirname(sys.executable), 'openstack')
# Seconds one openstack command may take on a busy machine (it loads
# every plugin it has).
COMMAND_TIMEOUT = 300
LEASE_TIMEOUT = 120


def _clean_environ():
    """The environment without any OS_* variable of the machine's, the
    tree under test first on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith('OS_')}
    env['PYTHONPATH'] = os.pathsep.join(
        [servers.REPO] + [p for p in env.get('PYTHONPATH', '').split(
            os.pathsep) if p])
    return env


def os_variables(keystone, username):
    project = ('service' if username == servers.SERVICE_USER
               else username.split('-')[0])
    return {
        'OS_AUTH_URL': keystone.url,
        'OS_IDENTITY_API_VERSION': '3',
        'OS_USERNAME': username,
        'OS_PASSWORD': servers.PASSWORD,
        'OS_PROJECT_NAME': project,
        'OS_USER_DOMAIN_NAME': 'Default',
        'OS_PROJECT_DOMAIN_NAME': 'Default',
        'OS_REGION_NAME': servers.REGION,
        'OS_INTERFACE': 'public',
    }


def openstack(*args, env=None, check=True):
    if not os.path.exists(OPENSTACK):
        pytest.fail('the openstack command is not installed next to %s' %
                    sys.executable)
    result = subprocess.run([OPENSTACK] + list(args), env=env,
                            capture_output=True, text=True,
                            stdin=subprocess.DEVNULL,
                            timeout=COMMAND_TIMEOUT)
    if check:
        assert result.returncode == 0, (args, result.returncode,
                                        result.stdout, result.stderr)
    return result


@pytest.fixture(scope='module')
def clouds_yaml(keystone, tmp_path_factory):
    """A clouds.yaml with one cloud per user of project beta."""
    clouds = {}
    for username in ('beta-member', 'beta-reader'):
        clouds[username] = {
            'auth': {'auth_url': keystone.url, 'username': username,
                     'password': servers.PASSWORD, 'project_name': 'beta',
                     'user_domain_name': 'Default',
                     'project_domain_name': 'Default'},
            'region_name': servers.REGION,
            'identity_api_version': 3,
            'interface': 'public',
        }
    path = tmp_path_factory.mktemp('clouds') / 'clouds.yaml'
    path.write_text(yaml.safe_dump({'clouds': clouds}))
    return str(path)


def _as(keystone, username):
    env = _clean_environ()
    env.update(os_variables(keystone, username))
    return env


def _cloud(clouds_yaml, cloud):
    env = _clean_environ()
    env['OS_CLIENT_CONFIG_FILE'] = clouds_yaml
    env['OS_CLOUD'] = cloud
    return env


def _wait_status(keystone, composable, lease, statuses):
    """Waits through the API itself: each openstack command loads every
    plugin it has, seconds on a busy machine, too slow to poll with."""
    headers = {'OpenStack-API-Version': 'composable 1.0',
               'X-Auth-Token': keystone.user_token('alpha-member')}
    deadline = time.monotonic() + LEASE_TIMEOUT
    while True:
        resp = requests.get('%s/v1/leases/%s' % (composable.endpoint, lease),
                            headers=headers, timeout=60)
        assert resp.status_code == 200, resp.text
        if resp.json()['status'] in statuses:
            return resp.json()
        assert time.monotonic() < deadline, resp.json()
        time.sleep(0.5)


def test_lease_life_with_os_variables_and_catalog(keystone, composable,
                                                  clouds_yaml):
    member = _as(keystone, 'alpha-member')
    pools = json.loads(openstack('composable', 'pool', 'list', '-f', 'json',
                                 env=member).stdout)
    assert {'memory-pool', 'gpu-pool'} <= {p['name'] for p in pools}

    name = 'cli-%s' % uuid.uuid4().hex[:8]
    created = json.loads(openstack('composable', 'lease', 'create', name,
                                   '--memory', '1G', '-f', 'json',
                                   env=member).stdout)
    lease = created['uuid']
    try:
        assert created['project_id'] == keystone.ids['alpha']
        _wait_status(keystone, composable, lease, ['reserved'])
        listed = json.loads(openstack('composable', 'lease', 'list', '-f',
                                      'json', env=member).stdout)
        assert lease in [x['UUID'] if 'UUID' in x else x['uuid']
                         for x in listed]

        # Project beta, through clouds.yaml: alpha's lease does not exist.
        other = _cloud(clouds_yaml, 'beta-member')
        result = openstack('composable', 'lease', 'show', lease, env=other,
                           check=False)
        assert result.returncode == 1, result
        assert 'could not be found' in result.stderr, result.stderr
        assert '(HTTP 404)' in result.stderr, result.stderr
        listed = json.loads(openstack('composable', 'lease', 'list', '-f',
                                      'json', env=other).stdout)
        assert lease not in json.dumps(listed)
        result = openstack('composable', 'lease', 'delete', lease,
                           env=other, check=False)
        assert result.returncode == 1, result
        assert '(HTTP 404)' in result.stderr, result.stderr

        # A reader of alpha sees it and may not change it.
        reader = _as(keystone, 'alpha-reader')
        assert json.loads(openstack('composable', 'lease', 'show', lease,
                                    '-f', 'json', env=reader).stdout)[
            'uuid'] == lease
        result = openstack('composable', 'lease', 'delete', lease,
                           env=reader, check=False)
        assert result.returncode == 1, result
        assert '(HTTP 403)' in result.stderr, result.stderr
        _wait_status(keystone, composable, lease, ['reserved'])

        # Inventory is the administrator's.
        result = openstack('composable', 'fabric', 'list', env=member,
                           check=False)
        assert result.returncode == 1, result
        assert '(HTTP 403)' in result.stderr, result.stderr
        admin = _as(keystone, 'alpha-admin')
        fabrics = json.loads(openstack('composable', 'fabric', 'list',
                                       '-f', 'json', env=admin).stdout)
        assert 'demo-fabric' in json.dumps(fabrics)
    finally:
        openstack('composable', 'lease', 'delete', lease, env=member,
                  check=False)
    _wait_status(keystone, composable, lease, ['released'])


def test_wrong_password_is_refused_before_composable(keystone, composable):
    env = _as(keystone, 'alpha-member')
    env['OS_PASSWORD'] = 'not-the-password'
    result = openstack('composable', 'pool', 'list', env=env, check=False)
    assert result.returncode == 1, result
    assert '401' in result.stderr or 'authenticat' in \
        result.stderr.lower(), result.stderr


def test_region_without_composable_says_where_to_look(keystone,
                                                      composable):
    env = _as(keystone, 'alpha-member')
    env['OS_REGION_NAME'] = 'Nowhere'
    result = openstack('composable', 'pool', 'list', env=env, check=False)
    assert result.returncode == 1, result
    assert 'Could not find the composable API endpoint' in result.stderr, \
        result.stderr
