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

"""Nova's functional-test machinery, out of Nova's tree."""

import os
import sysconfig

from nova.tests.functional import integrated_helpers


def api_paste_config():
    """The api-paste.ini the nova wheel installs under <prefix>/etc/nova
    (Nova's test fixture looks for it in a source tree)."""
    for prefix in (sysconfig.get_path('data'), os.sys.prefix):
        path = os.path.join(prefix, 'etc', 'nova', 'api-paste.ini')
        if os.path.exists(path):
            return path
    raise RuntimeError('nova api-paste.ini not found; is nova installed?')


class OutOfTreeMixin(object):
    """What Nova's test base needs out of Nova's tree, under pytest."""

    def setUp(self):
        # Before Nova's setUp starts nova-api (an override wins over the
        # default Nova's ConfFixture sets).
        self.flags(api_paste_config=api_paste_config(), group='wsgi')
        super().setUp()

    def _clear_attrs(self):
        # Nova drops every public instance attribute after a test; pytest
        # set the test method as one and deletes it itself afterwards.
        name = self._testMethodName
        method = self.__dict__.get(name)
        super()._clear_attrs()
        if method is not None:
            self.__dict__[name] = method


class IntegratedTestBase(OutOfTreeMixin,
                         integrated_helpers._IntegratedTestBase):
    pass


class ProviderUsageTestCase(OutOfTreeMixin,
                            integrated_helpers.ProviderUsageBaseTestCase):
    compute_driver = 'fake.MediumFakeDriver'
