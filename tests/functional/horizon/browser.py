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

"""Headless Chromium through Selenium and chromedriver, as a person uses
Horizon: log in, click, fill in forms, wait for what the page shows.

Selenium drives Debian's ``chromium`` with Debian's ``chromium-driver``:
both come from the same source package, so their versions always match
(Playwright would need its own browser build, which it downloads, or a
Chromium within the narrow range its protocol client supports). Selenium
is given both paths and so never looks for or downloads a driver.
"""

import glob
import os
import re
import shutil
import tempfile
import time

from selenium.common import exceptions as sel_exc
from selenium import webdriver
from selenium.webdriver.chrome import service as chrome_service
from selenium.webdriver.common.by import By

# Seconds a page, a modal or a status change may take on a busy two-core
# machine (Horizon renders pages with Keystone and composable calls).
PAGE_TIMEOUT = 180
WINDOW = (1280, 800)


class Browser(object):

    def __init__(self, base_url, screenshot_dir, chromium, chromedriver):
        self.base_url = base_url
        self.screenshot_dir = screenshot_dir
        # The profile lives in the test's directory, not in /tmp.
        self._profile = tempfile.mkdtemp(prefix='chromium-profile-',
                                         dir=screenshot_dir)
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for arg in ('--headless=new', '--no-sandbox', '--disable-gpu',
                    '--disable-dev-shm-usage', '--lang=en-US',
                    '--window-size=%d,%d' % WINDOW,
                    '--user-data-dir=%s' % self._profile):
            options.add_argument(arg)
        service = chrome_service.Service(
            executable_path=chromedriver,
            log_output=os.path.join(screenshot_dir, 'chromedriver.log'))
        self.driver = webdriver.Chrome(options=options, service=service)
        self.driver.set_page_load_timeout(PAGE_TIMEOUT)

    def quit(self):
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self._profile, ignore_errors=True)

    # ------------------------------------------------------------ basics

    def get(self, path):
        self.driver.get(self.base_url + path)

    def screenshot(self, name):
        """Save the window as NN-name.png; returns the path."""
        # Numbered in the order taken, across the tests of the run.
        count = len(glob.glob(os.path.join(self.screenshot_dir,
                                           '[0-9]*.png'))) + 1
        safe = re.sub(r'[^A-Za-z0-9_.-]+', '-', name)
        path = os.path.join(self.screenshot_dir,
                            '%02d-%s.png' % (count, safe))
        self.driver.save_screenshot(path)
        return path

    def wait_for(self, predicate, what, timeout=PAGE_TIMEOUT, reload=None):
        """Wait until ``predicate()`` is true (exceptions count as not
        yet); ``reload`` seconds between page reloads, for what the page
        does not update by itself."""
        deadline = time.monotonic() + timeout
        last_reload = time.monotonic()
        while True:
            try:
                result = predicate()
                if result:
                    return result
            except (sel_exc.NoSuchElementException,
                    sel_exc.StaleElementReferenceException):
                pass
            now = time.monotonic()
            if now > deadline:
                raise AssertionError(
                    'Timed out after %ss waiting for %s; the page at %s '
                    'shows:\n%s' % (timeout, what, self.driver.current_url,
                                    self.text()[:3000]))
            if reload and now - last_reload > reload:
                self.driver.refresh()
                last_reload = now
            time.sleep(0.5)

    def find(self, css):
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css):
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def visible(self, css):
        return [e for e in self.find_all(css) if e.is_displayed()]

    def text(self):
        try:
            return self.driver.find_element(By.TAG_NAME, 'body').text
        except sel_exc.WebDriverException:
            return ''

    def fill(self, field_id, value):
        field = self.find('#' + field_id)
        field.clear()
        field.send_keys(value)

    def choose(self, field_id, value):
        """Pick ``value`` in one of Horizon's themed selects as a person
        does: open its menu, click the option; the hidden <select> it
        drives then holds the value."""
        select = self.find('#' + field_id)
        box = select.find_element(
            By.XPATH, './ancestor::div[contains(@class, "themable-select")]')
        box.find_element(By.CSS_SELECTOR, 'button.dropdown-toggle').click()
        options = self.wait_for(
            lambda: [a for a in box.find_elements(
                By.CSS_SELECTOR, 'a[data-select-value="%s"]' % value)
                if a.is_displayed()],
            'the option %s of %s' % (value, field_id))
        options[0].click()
        self.wait_for(lambda: select.get_attribute('value') == value,
                      '%s set to %s' % (field_id, value))

    # ------------------------------------------------------------ Horizon

    def login(self, username, password, next_path):
        self.driver.delete_all_cookies()
        self.get('/auth/login/?next=%s' % next_path)
        self.wait_for(lambda: self.find('#id_username'), 'the login form')
        self.fill('id_username', username)
        self.fill('id_password', password)
        self.find('#loginBtn').click()
        self.wait_for(
            lambda: self.driver.current_url.split('?')[0].endswith(
                next_path) and self.find_all('.user-menu, #profile_editor'
                                             '_switcher, .navbar'),
            '%s logged in and on %s' % (username, next_path))

    def logout(self):
        # The user menu's Sign Out form (a POST with the page's CSRF
        # token: Django refuses GET logouts), submitted as such: a click
        # through the menu's drop-down animation could land elsewhere on
        # a busy machine.
        form = self.find('.user-menu form[method=post]')
        self.driver.execute_script('arguments[0].submit();', form)
        self.wait_for(lambda: self.find('#id_username'), 'the login form')

    def messages(self):
        """The texts of Horizon's alert messages on the page."""
        return [e.text for e in self.find_all('.alert, .messages .alert')]

    def row(self, table, object_id):
        return self.find('#%s__row__%s' % (table, object_id))

    def row_action(self, table, object_id, action):
        """Click a row's action: the first is a button, the others are
        in the row's drop-down menu."""
        css = '#%s__row_%s__action_%s' % (table, object_id, action)
        if not self.visible(css):
            self.row(table, object_id).find_element(
                By.CSS_SELECTOR, '.dropdown-toggle').click()
        self.wait_for(lambda: self.visible(css),
                      'the action %s of %s' % (action, object_id))[0].click()

    def row_by_text(self, text):
        """The table row with a cell reading ``text``."""
        for cell in self.find_all('table tbody tr td'):
            if cell.text.strip() == text:
                return cell.find_element(By.XPATH, './ancestor::tr')
        raise sel_exc.NoSuchElementException(text)

    def row_by_link_text(self, text):
        for link in self.find_all('table tbody tr td a'):
            if link.text.strip() == text:
                return link.find_element(By.XPATH, './ancestor::tr')
        raise sel_exc.NoSuchElementException(text)
