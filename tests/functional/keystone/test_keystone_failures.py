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

"""composable-api when Keystone fails it: Keystone down (503 with what to
do, then recovery without a restart of composable), and revoked tokens
(401, at the latest ``token_cache_time`` after the revocation)."""

import time

import requests

from tests.functional.keystone import servers

HEADERS = {'OpenStack-API-Version': 'composable 1.0'}
# Seconds a request may take on a busy two-core machine.
TIMEOUT = 60


def _get(composable, path, token=None):
    headers = dict(HEADERS)
    if token:
        headers['X-Auth-Token'] = token
    return requests.get(composable.endpoint + path, headers=headers,
                        timeout=TIMEOUT)


def _fresh_token(keystone, username):
    """A token composable has never seen (so none of its API workers has
    it cached)."""
    project = username.split('-')[0]
    return keystone.password_token(username, servers.PASSWORD, project)[0]


def _revoke(keystone, token):
    resp = requests.delete(keystone.url + '/auth/tokens', headers={
        'X-Auth-Token': token, 'X-Subject-Token': token}, timeout=TIMEOUT)
    assert resp.status_code == 204, resp.text


def _api_error(resp, status, code):
    assert resp.status_code == status, resp.text
    assert resp.headers['Content-Type'].startswith('application/json')
    error, = resp.json()['errors']
    assert error['status'] == status
    assert error['code'] == code
    assert error['request_id'] == resp.headers['X-OpenStack-Request-Id']
    assert 'Traceback' not in resp.text
    return error


def test_keystone_down_is_503_with_what_to_do_then_recovers(
        keystone, composable):
    token = _fresh_token(keystone, 'alpha-reader')
    with _keystone_stopped(keystone):
        resp = _get(composable, '/v1/pools', token)
        error = _api_error(resp, 503, 'composable.identity.unavailable')
        assert 'Keystone' in error['detail']
        assert 'try again' in error['detail'].lower()
        # What needs no Keystone still works: version discovery, and the
        # refusal of a request without a token.
        assert _get(composable, '/').status_code == 200
        _api_error(_get(composable, '/v1/pools'), 401,
                   'composable.unauthorized')
    # Keystone is back: the same token works, composable was not
    # restarted.
    deadline = time.monotonic() + servers.START_TIMEOUT
    while True:
        resp = _get(composable, '/v1/pools', token)
        if resp.status_code == 200:
            break
        assert resp.status_code == 503, resp.text
        assert time.monotonic() < deadline, (
            'composable still refuses with %s after Keystone came back: %s'
            % (resp.status_code, resp.text))
        time.sleep(1)
    assert {p['name'] for p in resp.json()['pools']} >= {'memory-pool'}


class _keystone_stopped(object):
    """Keystone stopped inside the block, serving again after it, on
    failure too (the other tests of the run share it)."""

    def __init__(self, keystone):
        self.keystone = keystone

    def __enter__(self):
        self.keystone.stop()
        return self.keystone

    def __exit__(self, *exc):
        self.keystone.serve()
        return False


def test_token_revoked_before_use_is_401(keystone, composable):
    token = _fresh_token(keystone, 'alpha-member')
    _revoke(keystone, token)
    resp = _get(composable, '/v1/leases', token)
    error = _api_error(resp, 401, 'composable.unauthorized')
    assert 'revoked' in error['detail']
    assert keystone.url.rsplit('/v3', 1)[0] in resp.headers[
        'WWW-Authenticate']


def test_token_revoked_after_use_is_refused_within_the_cache_time(
        keystone, composable):
    token = _fresh_token(keystone, 'alpha-member')
    assert _get(composable, '/v1/leases', token).status_code == 200
    _revoke(keystone, token)
    revoked_at = time.monotonic()
    # Until each API worker's cached validation expires the token may
    # still pass; never anything but 200 or 401, and 401 in the end.
    deadline = revoked_at + servers.ComposableAll.TOKEN_CACHE_TIME + 120
    while True:
        resp = _get(composable, '/v1/leases', token)
        if resp.status_code == 401:
            break
        assert resp.status_code == 200, resp.text
        assert time.monotonic() < deadline, (
            'a token revoked %.0fs ago is still accepted' %
            (time.monotonic() - revoked_at))
        time.sleep(1)
    _api_error(resp, 401, 'composable.unauthorized')
    # Once the cache time has passed since the revocation, by every API
    # worker (each has a cache of its own).
    while time.monotonic() < revoked_at + (
            servers.ComposableAll.TOKEN_CACHE_TIME + 1):
        time.sleep(0.5)
    for _ in range(8):
        assert _get(composable, '/v1/leases', token).status_code == 401
