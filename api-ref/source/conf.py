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

"""Sphinx configuration of the composable API reference (os-api-ref)."""

extensions = [
    'os_api_ref',
    'openstackdocstheme',
]

# openstackdocstheme
openstackdocs_repo_name = 'openstack/composable'
openstackdocs_bug_project = 'composable'
openstackdocs_bug_tag = 'api-ref'
openstackdocs_auto_name = False

html_theme = 'openstackdocs'
html_theme_options = {
    'sidebar_mode': 'toc',
}

source_suffix = '.rst'
master_doc = 'index'

project = 'Composable API Reference'
copyright = '2026, OpenStack Foundation'

exclude_patterns = []
add_module_names = False
pygments_style = 'native'

htmlhelp_basename = 'composableapi-refdoc'
