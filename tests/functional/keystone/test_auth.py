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

"""composable-api behind keystonemiddleware with a real Keystone: what a
request without a valid token gets."""

import requests

HEADERS = {'OpenStack-API-Version': 'composable 1.0'}


def test_version_document_needs_no_token(composable):
    resp = requests.get(composable.endpoint + '/', timeout=30)
    assert resp.status_code == 200, resp.text
    assert resp.json()['versions'] or resp.json()


def test_no_token_is_401_with_where_to_authenticate(keystone, composable):
    resp = requests.get(composable.endpoint + '/v1/pools', headers=HEADERS,
                        timeout=30)
    assert resp.status_code == 401, resp.text
    assert keystone.url.rsplit('/v3', 1)[0] in resp.headers[
        'WWW-Authenticate']


def test_forged_token_is_401(composable):
    headers = dict(HEADERS, **{'X-Auth-Token': 'gAAAAAforged'})
    resp = requests.get(composable.endpoint + '/v1/pools', headers=headers,
                        timeout=30)
    assert resp.status_code == 401, resp.text


def test_real_token_is_accepted(keystone, composable):
    headers = dict(HEADERS,
                   **{'X-Auth-Token': keystone.user_token('alpha-reader')})
    resp = requests.get(composable.endpoint + '/v1/pools', headers=headers,
                        timeout=30)
    assert resp.status_code == 200, resp.text
    assert {p['name'] for p in resp.json()['pools']} >= {'memory-pool',
                                                         'gpu-pool'}
