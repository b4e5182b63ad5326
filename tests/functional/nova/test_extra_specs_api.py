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

"""nova-api validates composable: flavor extra specs with our plugin."""

from nova.tests.functional.api import client as api_client

from tests.functional.nova import base


class ComposableExtraSpecsTest(base.IntegratedTestBase):
    ADMIN_API = True
    microversion = '2.86'

    def setUp(self):
        super().setUp()
        self.flavor_id = self._create_flavor()

    def test_valid_specs_are_accepted(self):
        specs = {'composable:attach_mode': 'guest',
                 'composable:on_bind_failure': 'ignore',
                 'composable:gpu_model': 'A100',
                 'resources:CUSTOM_COMPOSABLE_MEMORY_MB': '4096'}
        self.admin_api.post_extra_spec(self.flavor_id,
                                       {'extra_specs': specs})
        self.assertEqual(specs,
                         self.admin_api.get_extra_specs(self.flavor_id))

    def test_bad_attach_mode_is_refused(self):
        exc = self.assertRaises(
            api_client.OpenStackApiException,
            self.admin_api.post_extra_spec, self.flavor_id,
            {'extra_specs': {'composable:attach_mode': 'bogus'}})
        self.assertEqual(400, exc.response.status_code)
        self.assertIn("'bogus' is not one of: host, guest", exc.response.text)
        self.assertEqual({}, self.admin_api.get_extra_specs(self.flavor_id))

    def test_unknown_composable_spec_is_refused(self):
        exc = self.assertRaises(
            api_client.OpenStackApiException,
            self.admin_api.put_extra_spec, self.flavor_id,
            'composable:colour', {'composable:colour': 'blue'})
        self.assertEqual(400, exc.response.status_code)


class ComposableExtraSpecsOldMicroversionTest(base.IntegratedTestBase):
    """Before 2.86 nova-api does not validate extra specs at all."""
    ADMIN_API = True
    microversion = '2.85'

    def test_bad_attach_mode_is_stored(self):
        flavor_id = self._create_flavor()
        self.admin_api.post_extra_spec(
            flavor_id, {'extra_specs': {'composable:attach_mode': 'bogus'}})
        self.assertEqual({'composable:attach_mode': 'bogus'},
                         self.admin_api.get_extra_specs(flavor_id))
