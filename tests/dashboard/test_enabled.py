#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""The ``enabled`` files as Horizon reads them."""

import importlib
import pkgutil
import unittest

from composable.dashboard import enabled


def _files():
    return [importlib.import_module('%s.%s' % (enabled.__name__, name))
            for _, name, _ in pkgutil.iter_modules(enabled.__path__)]


class EnabledFilesTests(unittest.TestCase):

    def test_the_application_is_added_once(self):
        # Horizon adds every file's ADD_INSTALLED_APPS; Django refuses an
        # application listed twice.
        added = [app for module in _files()
                 for app in getattr(module, 'ADD_INSTALLED_APPS', [])]
        self.assertEqual(['composable.dashboard'], added)

    def test_every_panel_names_a_panel_class_and_a_group(self):
        groups = {(m.PANEL_GROUP_DASHBOARD, m.PANEL_GROUP)
                  for m in _files() if hasattr(m, 'PANEL_GROUP_DASHBOARD')}
        panels = [m for m in _files() if hasattr(m, 'ADD_PANEL')]
        self.assertEqual(7, len(panels))
        for module in panels:
            self.assertIn((module.PANEL_DASHBOARD, module.PANEL_GROUP),
                          groups, module.__name__)
            path, _, name = module.ADD_PANEL.rpartition('.')
            panel = getattr(importlib.import_module(path), name)
            self.assertEqual(module.PANEL, panel.slug, module.__name__)
