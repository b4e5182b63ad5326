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

"""A memory lease's life in Horizon, clicked through in Chromium by the
people of two projects, against real Keystone and composable-all.

Each page the test looks at is saved as a PNG in the screenshot
directory (``COMPOSABLE_SCREENSHOT_DIR``, else a temporary directory of
the run); the documentation's screenshots come from here.
"""

import requests

from tests.functional.keystone import servers

LEASES = '/project/composable_leases/'
HEADERS = {'OpenStack-API-Version': 'composable 1.0'}
LEASE_NAME = 'batch-swap'


def _api(keystone, composable, username, method, path, version=None,
         **kwargs):
    project = username.split('-')[0]
    token = keystone.password_token(username, servers.PASSWORD, project)[0]
    headers = dict(HEADERS, **{'X-Auth-Token': token})
    if version:
        headers['OpenStack-API-Version'] = 'composable %s' % version
    return requests.request(method, composable.endpoint + path,
                            headers=headers, timeout=60, **kwargs)


def _cell(browser, row, header):
    """The text of ``row``'s cell under the column headed ``header``."""
    table = row.find_element('xpath', './ancestor::table')
    headers = [th.text.strip() for th in
               table.find_elements('css selector', 'thead tr.table_column_'
                                   'header th, thead tr:last-child th')]
    cells = row.find_elements('css selector', 'td')
    return cells[headers.index(header)].text.strip()


def _status(browser, lease_id):
    return _cell(browser, browser.row('leases', lease_id), 'Status')


def test_member_leases_memory_admin_binds_other_project_sees_nothing(
        browser, horizon_stack):
    keystone, composable, horizon = horizon_stack

    # --- alpha's member: an empty list, then a lease through the form.
    browser.login('alpha-member', servers.PASSWORD, LEASES)
    browser.wait_for(lambda: 'No items to display' in browser.text(),
                     'the empty leases table')
    browser.screenshot('leases-empty')

    browser.find('#leases__action_create').click()
    browser.wait_for(lambda: browser.visible('#create_lease_form #id_name'),
                     'the Create Lease form')
    browser.fill('id_name', LEASE_NAME)
    browser.fill('id_memory', '1GiB')
    browser.screenshot('create-lease')
    browser.find('#create_lease_form [type=submit]').click()

    row = browser.wait_for(lambda: browser.row_by_link_text(LEASE_NAME),
                           'the new lease in the table')
    lease_id = row.get_attribute('data-object-id')
    assert lease_id
    assert any('was created' in m for m in browser.messages()), (
        browser.messages())
    # The row follows allocating -> reserved by itself (ajax update).
    browser.wait_for(lambda: _status(browser, lease_id) == 'Reserved',
                     'the lease reaching Reserved')
    row = browser.row('leases', lease_id)
    assert _cell(browser, row, 'Memory') == '1GB'
    assert _cell(browser, row, 'Pool') == 'memory-pool'
    browser.screenshot('lease-reserved')

    resp = _api(keystone, composable, 'alpha-member', 'GET',
                '/v1/leases/%s' % lease_id)
    assert resp.status_code == 200, resp.text
    assert resp.json()['status'] == 'reserved'
    assert resp.json()['memory_mb'] == 1024

    # The detail page: extents and the action log.
    browser.find('#leases__row__%s a' % lease_id).click()
    browser.wait_for(lambda: lease_id in browser.driver.current_url and
                     'Attach mode' in browser.text(),
                     'the lease detail page')
    assert LEASE_NAME in browser.find('.page-header').text
    assert lease_id in browser.text()
    browser.screenshot('lease-detail')

    # --- alpha's admin binds it to a host, through the API.
    resp = _api(keystone, composable, 'alpha-admin', 'POST',
                '/v1/leases/%s/bind' % lease_id, json={'host': 'compute-0'})
    assert resp.status_code == 202, resp.text

    # --- the member sees it bound.
    browser.get(LEASES)
    browser.wait_for(lambda: _status(browser, lease_id) == 'Bound',
                     'the lease shown as Bound', reload=10)
    assert _cell(browser, browser.row('leases', lease_id),
                 'Host / Server') == 'compute-0'
    browser.screenshot('lease-bound')

    browser.get('/project/composable_pools/')
    browser.wait_for(lambda: browser.row_by_link_text('memory-pool')
                     if browser.find_all('table a') else
                     'memory-pool' in browser.text(), 'the pools table')
    browser.screenshot('pools')

    browser.get('/project/api_access/')
    browser.wait_for(lambda: composable.endpoint in browser.text(),
                     'the composable endpoint in the service catalog')
    browser.screenshot('api-access')

    # --- the member deletes it: check the row, Delete Leases, confirm.
    browser.get(LEASES)
    browser.wait_for(lambda: browser.row('leases', lease_id),
                     'the lease row')
    # Horizon's themed checkbox: the label is what a person clicks.
    browser.find('#leases__row__%s td.multi_select_column label'
                 % lease_id).click()
    browser.find('#leases__action_delete').click()
    confirm = browser.wait_for(
        lambda: browser.visible('.modal-footer .btn-danger, '
                                '.modal-footer .btn-primary'),
        'the delete confirmation')
    browser.screenshot('delete-confirm')
    confirm[-1].click()
    browser.wait_for(lambda: not browser.find_all(
        '#leases__row__%s' % lease_id) or _status(
            browser, lease_id) == 'Released',
        'the lease leaving the table', reload=10)

    def released():
        resp = _api(keystone, composable, 'alpha-member', 'GET',
                    '/v1/leases/%s' % lease_id)
        return resp.status_code == 200 and resp.json()['status'] == \
            'released'
    browser.wait_for(released, 'the API reporting the lease released')
    browser.get(LEASES)
    browser.wait_for(lambda: 'No items to display' in browser.text(),
                     'the empty table again', reload=10)
    browser.screenshot('lease-deleted')
    browser.logout()

    # --- beta's member sees nothing of it, not even through its URL.
    browser.login('beta-member', servers.PASSWORD, LEASES)
    browser.wait_for(lambda: 'No items to display' in browser.text(),
                     "beta's empty leases table")
    assert LEASE_NAME not in browser.text()
    browser.screenshot('other-project-leases')
    browser.get(LEASES + '%s/' % lease_id)
    browser.wait_for(
        lambda: any('Unable to retrieve the lease' in m
                    for m in browser.messages()),
        "Horizon's message that the lease cannot be had")
    assert LEASE_NAME not in browser.text()
    assert lease_id not in browser.driver.current_url
    browser.screenshot('other-project-lease-url')
    resp = _api(keystone, composable, 'beta-member', 'GET',
                '/v1/leases/%s' % lease_id)
    assert resp.status_code == 404, resp.text
    browser.logout()


def test_admin_sees_the_inventory(browser, horizon_stack):
    browser.login('alpha-admin', servers.PASSWORD,
                  '/admin/composable_admin_hosts/')
    browser.wait_for(lambda: 'compute-0' in browser.text(),
                     'compute-0 in the hosts table')
    assert 'compute-1' in browser.text()
    # The hosts' fabric by its name.
    assert _cell(browser, browser.row_by_text('compute-0'),
                 'Fabric') == 'demo-fabric'
    browser.screenshot('admin-hosts')
    browser.get('/admin/composable_admin_devices/')
    browser.wait_for(lambda: 'gpu-0' in browser.text(),
                     'the devices table')
    browser.screenshot('admin-devices')
    # A project member has no Admin dashboard.
    browser.logout()
    browser.login('alpha-member', servers.PASSWORD, LEASES)
    browser.get('/admin/composable_admin_hosts/')
    browser.wait_for(lambda: 'not authorized' in browser.text().lower(),
                     'the member kept out of the Admin dashboard')
    assert 'compute-0' not in browser.text()
    browser.screenshot('member-not-authorized')


def test_bad_input_and_refusals_are_explained(browser, horizon_stack):
    keystone, composable, horizon = horizon_stack
    browser.login('beta-member', servers.PASSWORD, LEASES)

    # A size Horizon cannot read: the form says what it takes, and
    # nothing reaches the API.
    browser.find('#leases__action_create').click()
    browser.wait_for(lambda: browser.visible('#create_lease_form #id_name'),
                     'the Create Lease form')
    browser.fill('id_name', 'typo')
    browser.fill('id_memory', '12 parsecs')
    browser.find('#create_lease_form [type=submit]').click()
    browser.wait_for(
        lambda: 'Enter a size such as 512MiB' in browser.text(),
        'the form explaining the memory size')
    browser.screenshot('create-lease-bad-size')
    resp = _api(keystone, composable, 'beta-member', 'GET',
                '/v1/leases?name=typo')
    assert resp.status_code == 200, resp.text
    assert resp.json()['leases'] == []

    # More than the pool could ever hold: the API refuses, and Horizon
    # shows the API's own reason under Details.
    browser.get(LEASES)
    browser.wait_for(lambda: browser.find('#leases__action_create'),
                     'the leases table')
    browser.find('#leases__action_create').click()
    browser.wait_for(lambda: browser.visible('#create_lease_form #id_name'),
                     'the Create Lease form')
    browser.fill('id_name', 'too-big')
    browser.fill('id_memory', '64GiB')
    browser.find('#create_lease_form [type=submit]').click()
    browser.wait_for(
        lambda: any('Unable to create lease "too-big"' in m
                    for m in browser.messages()),
        "Horizon's message that the lease was refused")
    resp = _api(keystone, composable, 'beta-member', 'POST', '/v1/leases',
                json={'name': 'too-big', 'memory_mb': 64 * 1024})
    assert 400 <= resp.status_code < 500, resp.text
    reason = resp.json()['errors'][0]['detail']
    browser.driver.find_element(
        'xpath', "//div[contains(@class, 'alert')]"
                 "//a[normalize-space()='Details']").click()
    browser.wait_for(lambda: reason[:60] in browser.text(),
                     "the API's reason on the page: %s" % reason)
    browser.screenshot('create-lease-refused')
    resp = _api(keystone, composable, 'beta-member', 'GET',
                '/v1/leases?name=too-big')
    assert resp.json()['leases'] == []


def _api_reason_shown(browser, reason):
    """Open the Details of Horizon's error message and wait for the API's
    own reason there."""
    browser.driver.find_element(
        'xpath', "//div[contains(@class, 'alert')]"
                 "//a[normalize-space()='Details']").click()
    browser.wait_for(lambda: reason[:60] in browser.text(),
                     "the API's reason on the page: %s" % reason)


def _lease_named(keystone, composable, username, name):
    resp = _api(keystone, composable, username, 'GET',
                '/v1/leases?name=%s' % name)
    assert resp.status_code == 200, resp.text
    return resp.json()['leases']


def test_admin_binds_a_lease_to_a_host(browser, horizon_stack):
    keystone, composable, horizon = horizon_stack
    resp = _api(keystone, composable, 'alpha-member', 'POST', '/v1/leases',
                json={'name': 'host-swap', 'memory_mb': 1024})
    assert resp.status_code == 201, resp.text
    lease_id = resp.json()['uuid']

    browser.login('alpha-admin', servers.PASSWORD, LEASES)
    browser.wait_for(lambda: _status(browser, lease_id) == 'Reserved',
                     'the lease reaching Reserved', reload=10)

    # Guest mode needs a server: the API refuses, the form says why, and
    # the lease stays as it was.
    browser.row_action('leases', lease_id, 'bind_host')
    # (The themed selects' own <select> is hidden: the button is not.)
    browser.wait_for(
        lambda: browser.visible('#bind_host_lease_form [type=submit]'),
        'the Bind to Host form')
    browser.choose('id_host', 'compute-0')
    browser.choose('id_attach_mode', 'guest')
    browser.find('#bind_host_lease_form [type=submit]').click()
    browser.wait_for(
        lambda: any('Unable to bind the lease.' in m
                    for m in browser.messages()),
        "Horizon's message that the bind was refused")
    resp = _api(keystone, composable, 'alpha-admin', 'POST',
                '/v1/leases/%s/bind' % lease_id,
                json={'host': 'compute-0', 'attach_mode': 'guest'})
    assert resp.status_code == 400, resp.text
    _api_reason_shown(browser, resp.json()['errors'][0]['detail'])
    browser.screenshot('lease-bind-host-refused')
    [lease] = _lease_named(keystone, composable, 'alpha-member',
                           'host-swap')
    assert lease['status'] == 'reserved' and lease['host'] is None, lease

    # Host mode, on compute-0.
    browser.get(LEASES)
    browser.wait_for(lambda: browser.row('leases', lease_id),
                     'the lease row')
    browser.row_action('leases', lease_id, 'bind_host')
    browser.wait_for(
        lambda: browser.visible('#bind_host_lease_form [type=submit]'),
        'the Bind to Host form')
    browser.choose('id_host', 'compute-0')
    browser.screenshot('lease-bind-host')
    browser.find('#bind_host_lease_form [type=submit]').click()
    browser.wait_for(lambda: _status(browser, lease_id) == 'Bound',
                     'the lease shown as Bound', reload=10)
    assert _cell(browser, browser.row('leases', lease_id),
                 'Host / Server') == 'compute-0'
    browser.screenshot('lease-bound-to-host')
    [lease] = _lease_named(keystone, composable, 'alpha-member',
                           'host-swap')
    assert (lease['host'], lease['attach_mode']) == ('compute-0', 'host')
    # (That a member is refused the form is tests/dashboard's to check.)
    resp = _api(keystone, composable, 'alpha-member', 'DELETE',
                '/v1/leases/%s' % lease_id)
    assert resp.status_code in (202, 204), resp.text


def test_elastic_lease_shows_its_limits(browser, horizon_stack):
    keystone, composable, horizon = horizon_stack
    browser.login('beta-member', servers.PASSWORD, LEASES)

    def create(name, memory, low, high):
        browser.get(LEASES)
        browser.wait_for(lambda: browser.find('#leases__action_create'),
                         'the leases table')
        browser.find('#leases__action_create').click()
        browser.wait_for(
            lambda: browser.visible('#create_lease_form #id_name'),
            'the Create Lease form')
        browser.fill('id_name', name)
        browser.fill('id_memory', memory)
        browser.fill('id_elastic_min', low)
        browser.fill('id_elastic_max', high)
        browser.driver.execute_script('arguments[0].scrollIntoView();',
                                      browser.find('#id_headroom'))

    # Starting outside its own limits: the API's reason, nothing made.
    create('elastic-bad', '2GiB', '4GiB', '8GiB')
    browser.find('#create_lease_form [type=submit]').click()
    browser.wait_for(
        lambda: any('Unable to create lease "elastic-bad"' in m
                    for m in browser.messages()),
        "Horizon's message that the lease was refused")
    resp = _api(keystone, composable, 'beta-member', 'POST', '/v1/leases',
                version='1.2',
                json={'name': 'elastic-bad', 'memory_mb': 2048,
                      'elastic': {'min_mb': 4096, 'max_mb': 8192,
                                  'observation_window': 300,
                                  'prediction_window': 60}})
    assert resp.status_code == 400, resp.text
    _api_reason_shown(browser, resp.json()['errors'][0]['detail'])
    assert _lease_named(keystone, composable, 'beta-member',
                        'elastic-bad') == []

    create('elastic-swap', '2GiB', '1GiB', '4GiB')
    browser.screenshot('create-lease-elastic')
    browser.find('#create_lease_form [type=submit]').click()
    row = browser.wait_for(lambda: browser.row_by_link_text('elastic-swap'),
                           'the new lease in the table')
    lease_id = row.get_attribute('data-object-id')
    browser.wait_for(lambda: _status(browser, lease_id) == 'Reserved',
                     'the lease reaching Reserved', reload=10)
    resp = _api(keystone, composable, 'beta-member', 'GET',
                '/v1/leases/%s' % lease_id, version='1.2')
    elastic = resp.json()['elastic']
    assert (elastic['min_mb'], elastic['max_mb']) == (1024, 4096), elastic

    browser.find('#leases__row__%s a' % lease_id).click()
    browser.wait_for(lambda: 'Resized with its use' in browser.text(),
                     'the elastic limits on the lease page')
    text = browser.text()
    assert 'between 1GB and 4GB' in text, text
    assert 'memory-pool' in text
    browser.screenshot('lease-elastic-detail')
    resp = _api(keystone, composable, 'beta-member', 'DELETE',
                '/v1/leases/%s' % lease_id)
    assert resp.status_code in (202, 204), resp.text


def test_admin_creates_an_sriov_pool(browser, horizon_stack):
    keystone, composable, horizon = horizon_stack
    pools = '/admin/composable_admin_pools/'
    browser.login('alpha-admin', servers.PASSWORD, pools)

    def create(name):
        browser.get(pools)
        browser.wait_for(lambda: browser.find('#pools__action_create'),
                         'the pools table')
        browser.find('#pools__action_create').click()
        browser.wait_for(
            lambda: browser.visible('.modal #id_sriov_pf_address'),
            'the Create Pool form')
        browser.fill('id_name', name)
        browser.choose('id_kind', 'pci')
        browser.fill('id_fabric', 'demo-fabric')
        browser.fill('id_device_class', 'NIC')
        browser.choose('id_sriov_host', 'compute-0')
        browser.fill('id_sriov_pf_address', '0000:41:00.0')
        browser.fill('id_sriov_vf_count', '4')

    create('vf-pool')
    browser.screenshot('admin-create-sriov-pool')
    browser.find('.modal [type=submit]').click()
    browser.wait_for(
        lambda: 'compute-0 0000:41:00.0: 4 VFs, on_demand' in browser.text(),
        'the SR-IOV pool in the pools table')
    browser.screenshot('admin-pools-sriov')
    resp = _api(keystone, composable, 'alpha-admin', 'GET',
                '/v1/pools?kind=pci', version='1.3')
    [pool] = [p for p in resp.json()['pools'] if p['name'] == 'vf-pool']
    assert pool['sriov']['host'] == 'compute-0', pool
    assert pool['total'] == 4, pool

    # A physical function serves one pool: the API's reason, nothing
    # made.
    create('vf-pool-2')
    browser.find('.modal [type=submit]').click()
    browser.wait_for(
        lambda: any('Unable to create the pool.' in m
                    for m in browser.messages()),
        "Horizon's message that the pool was refused")
    resp = _api(keystone, composable, 'alpha-admin', 'POST', '/v1/pools',
                version='1.3',
                json={'name': 'vf-pool-2', 'kind': 'pci',
                      'fabric': 'demo-fabric', 'device_class': 'NIC',
                      'sriov': {'host': 'compute-0',
                                'pf_address': '0000:41:00.0',
                                'vf_count': 4}})
    assert resp.status_code == 409, resp.text
    _api_reason_shown(browser, resp.json()['errors'][0]['detail'])
    resp = _api(keystone, composable, 'alpha-admin', 'GET',
                '/v1/pools?kind=pci')
    assert 'vf-pool-2' not in [p['name'] for p in resp.json()['pools']]
