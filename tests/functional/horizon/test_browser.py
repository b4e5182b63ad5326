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


def _api(keystone, composable, username, method, path, **kwargs):
    project = username.split('-')[0]
    token = keystone.password_token(username, servers.PASSWORD, project)[0]
    headers = dict(HEADERS, **{'X-Auth-Token': token})
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
