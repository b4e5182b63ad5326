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

"""Sphinx configuration of the composable documentation."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, '..', '..'))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, 'doc', 'ext'))

extensions = [
    'openstackdocstheme',
    'oslo_config.sphinxext',
    'oslo_config.sphinxconfiggen',
    'oslo_policy.sphinxext',
    'oslo_policy.sphinxpolicygen',
    # Renders composable.common.states.TRANSITIONS (doc/ext).
    'lease_states',
]

# openstackdocstheme
openstackdocs_repo_name = 'openstack/composable'
openstackdocs_bug_project = 'composable'
openstackdocs_bug_tag = 'doc'
openstackdocs_auto_name = False
openstackdocs_pdf_link = False

# Sample configuration and policy files, generated at build time from the
# code (the same generators as tox -e genconfig / genpolicy).
config_generator_config_file = os.path.join(
    ROOT, 'etc', 'oslo-config-generator', 'composable.conf')
sample_config_basename = '_static/composable'
policy_generator_config_file = os.path.join(
    ROOT, 'etc', 'oslo-policy-generator', 'composable.conf')
sample_policy_basename = '_static/composable'

templates_path = []
source_suffix = '.rst'
master_doc = 'index'

project = 'composable'
copyright = '2026, OpenStack Foundation'

exclude_patterns = ['_build']
add_module_names = False
pygments_style = 'native'
# Plain literal blocks (diagrams) are not highlighted.
highlight_language = 'none'

html_theme = 'openstackdocs'
html_static_path = ['_static']
htmlhelp_basename = 'composabledoc'
