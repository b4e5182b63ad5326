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

"""A real Horizon with the composable plugin, as a process of the test run.

Everything is written into the test's own directory, nothing into the
virtualenv: a ``local/local_settings.py`` (Horizon's own way to be
configured) pointing at the test Keystone and keeping what Horizon writes
(the compressed CSS and JavaScript) there, and a settings module that
takes ``openstack_dashboard.settings`` and enables the plugin's
``enabled`` files the way ``openstack_dashboard/local/enabled`` would.
Django's ``runserver`` serves it on 127.0.0.1 (``--insecure`` serves the
static files with DEBUG off, so the pages are what production renders).
"""

import os
import subprocess
import sys
import threading
import time

import requests

from tests.functional.keystone import servers
from tests.functional import stack as stack_mod

SETTINGS_MODULE = 'composable_test_horizon_settings'

# Horizon's own way to be configured: openstack_dashboard.settings imports
# ``local.local_settings`` (a package it finds on sys.path, where the test's
# directory comes first), before it derives the rest from these values.
LOCAL_SETTINGS_TEMPLATE = '''\
# Written by tests/functional/horizon: Horizon for one test run.
DEBUG = False
ALLOWED_HOSTS = ['127.0.0.1', 'localhost']
SECRET_KEY = %(secret)r
OPENSTACK_KEYSTONE_URL = %(keystone_url)r
OPENSTACK_KEYSTONE_DEFAULT_ROLE = 'member'
OPENSTACK_ENDPOINT_TYPE = 'publicURL'
# Compressed CSS/JS go here, not into the virtualenv.
STATIC_ROOT = %(static_root)r
MEDIA_ROOT = %(media_root)r
SESSION_ENGINE = 'django.contrib.sessions.backends.signed_cookies'
CACHES = {'default': {
    'BACKEND': 'django.core.cache.backends.locmem.LocMemCache'}}
OPENSTACK_KEYSTONE_MULTIDOMAIN_SUPPORT = False
TIME_ZONE = 'UTC'
'''

# The plugin's enabled files, read as openstack_dashboard/local/enabled
# would be (the test does not copy files into the virtualenv).
SETTINGS_TEMPLATE = '''\
from openstack_dashboard.settings import *  # noqa
import openstack_dashboard.enabled
from openstack_dashboard.utils import settings as _dashboard_settings

import composable.dashboard.enabled

# Horizon's dashboards and the plugin's panels, in one ordered pass as
# Horizon makes it over its enabled folders.
HORIZON_CONFIG.pop('dashboards', None)
HORIZON_CONFIG.pop('default_dashboard', None)
INSTALLED_APPS = list(INSTALLED_APPS)
_dashboard_settings.update_dashboards(
    [composable.dashboard.enabled, openstack_dashboard.enabled],
    HORIZON_CONFIG, INSTALLED_APPS)
INSTALLED_APPS = list(dict.fromkeys(INSTALLED_APPS))
# A row in a transitional state is refreshed by the table's ajax update,
# first after this many milliseconds, then after twice, three times as
# long...: Horizon's 2.5 s would have the tests wait for the page more
# than for composable.
HORIZON_CONFIG['ajax_poll_interval'] = 500
'''


class Horizon(object):
    """Horizon on a free port of 127.0.0.1, logging in against
    ``keystone``."""

    def __init__(self, workdir, keystone):
        self.workdir = str(workdir)
        self.keystone = keystone
        self.port = stack_mod.free_port()
        self.url = 'http://127.0.0.1:%d' % self.port
        self.log = os.path.join(self.workdir, 'horizon.log')
        self.proc = None
        self._first_page = None

    def write_settings(self):
        static_root = os.path.join(self.workdir, 'static')
        media_root = os.path.join(self.workdir, 'media')
        for path in (static_root, media_root):
            os.makedirs(path, exist_ok=True)
        local = os.path.join(self.workdir, 'local')
        os.makedirs(local, exist_ok=True)
        with open(os.path.join(local, '__init__.py'), 'w'):
            pass
        with open(os.path.join(local, 'local_settings.py'), 'w') as f:
            f.write(LOCAL_SETTINGS_TEMPLATE % {
                'secret': os.urandom(24).hex(),
                'keystone_url': self.keystone.url,
                'static_root': static_root,
                'media_root': media_root,
            })
        with open(os.path.join(self.workdir, SETTINGS_MODULE + '.py'),
                  'w') as f:
            f.write(SETTINGS_TEMPLATE)

    def start(self):
        self.launch()
        self.wait_ready()

    def launch(self):
        """Start Horizon's process and ask for its login page, without
        waiting: the page needs no Keystone, so its first rendering
        compiles Horizon's SCSS while Keystone and composable start."""
        self.write_settings()
        env = dict(os.environ,
                   DJANGO_SETTINGS_MODULE=SETTINGS_MODULE,
                   PYTHONPATH=os.pathsep.join(
                       [self.workdir, servers.REPO] +
                       [p for p in os.environ.get('PYTHONPATH', '').split(
                           os.pathsep) if p]))
        cmd = [sys.executable, '-m', 'django', 'runserver', '--noreload',
               '--insecure', '127.0.0.1:%d' % self.port]
        with open(self.log, 'w') as log:
            self.proc = subprocess.Popen(
                cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, cwd=self.workdir,
                start_new_session=True)
        self._first_page = threading.Thread(
            target=self._ask_first_page, name='horizon-first-page',
            daemon=True)
        self._first_page.start()

    def _ask_first_page(self):
        deadline = time.monotonic() + servers.START_TIMEOUT
        while (time.monotonic() < deadline and self.proc.poll() is None
               and not self._login_page_renders()):
            time.sleep(0.2)

    def wait_ready(self):
        # The first rendering of the login page compiles Horizon's SCSS
        # (a minute or more on a busy machine): done once, before the
        # tests, so that the browser's page loads are quick.
        if self._first_page is not None:
            self._first_page.join(servers.START_TIMEOUT)
        servers.wait_until(self._login_page_renders, servers.START_TIMEOUT,
                           'Horizon rendering its login page at %s' %
                           self.url, self.proc, self.log)

    def _login_page_renders(self):
        try:
            resp = requests.get(self.url + '/auth/login/',
                                timeout=servers.START_TIMEOUT)
        except requests.RequestException:
            return False
        return resp.status_code == 200 and 'id_username' in resp.text

    def stop(self):
        servers.stop_process(self.proc)
