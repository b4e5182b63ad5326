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

"""The hook reads what Nova itself writes: the metadata is made here with
Nova's own config classes (nova.virt.libvirt.config, the ones its libvirt
driver uses in _get_guest_config_meta), and the hand-written domains of
tests/functional/hooks/nova_domain.py read the same."""

import json
import subprocess
import sys

import pytest

from composable.hooks import libvirt as hook
from tests.functional.hooks import nova_domain

INSTANCE = '3f9b4c1e-2d7a-4b6e-9c0d-1a2b3c4d5e6f'
SPECS = {'resources:CUSTOM_COMPOSABLE_MEMORY_MB': '2048',
         'composable:attach_mode': 'guest',
         'composable:on_bind_failure': 'ignore',
         'hw:cpu_policy': 'dedicated',
         'trait:CUSTOM_X': 'required'}

# Run in a process of its own: importing Nova registers Nova's options
# in oslo.config's global CONF, where some clash with composable's.
NOVA_SCRIPT = """
import json, sys
from nova.virt.libvirt import config as vconfig
args = json.loads(sys.argv[1])
meta = vconfig.LibvirtConfigGuestMetaNovaInstance()
meta.package = '34.0.0'
meta.name = 'server-1'
meta.creationTime = 1767225600
meta.roottype = 'image'
meta.rootid = args['image']
flavor = vconfig.LibvirtConfigGuestMetaNovaFlavor()
flavor.name = 'm1.composable'
flavor.id = 'c0ffee'
flavor.memory = 1024
flavor.vcpus = 1
flavor.disk = 1
flavor.swap = 0
flavor.ephemeral = 0
flavor.extra_specs = args['specs']
meta.flavor = flavor
owner = vconfig.LibvirtConfigGuestMetaNovaOwner()
owner.userid = args['user']
owner.username = 'demo'
owner.projectid = args['project']
owner.projectname = 'demo'
meta.owner = owner
sys.stdout.write(meta.to_xml())
"""


def _nova_metadata(extra_specs):
    """<nova:instance> as Nova's libvirt driver makes it
    (_get_guest_config_meta), with Nova's own classes."""
    args = json.dumps({'specs': extra_specs, 'image': nova_domain.IMAGE_ID,
                       'user': nova_domain.USER_ID,
                       'project': nova_domain.PROJECT_ID})
    result = subprocess.run([sys.executable, '-c', NOVA_SCRIPT, args],
                            capture_output=True, text=True, timeout=120)
    if result.returncode and 'No module named' in result.stderr:
        pytest.skip('Nova is not installed here')
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def _domain(metadata=None):
    return ("<domain type='kvm'><name>instance-1</name><uuid>%s</uuid>"
            "%s<devices/></domain>" % (
                INSTANCE, '<metadata>%s</metadata>' % metadata
                if metadata else ''))


@pytest.mark.parametrize('specs', [SPECS, {}])
def test_the_hook_reads_novas_metadata(specs):
    info = hook.parse_domain(_domain(_nova_metadata(specs)).encode())
    assert info['uuid'] == INSTANCE
    assert info['nova'] is True
    assert info['flavor'] == 'm1.composable'
    assert info['project_id'] == nova_domain.PROJECT_ID
    assert info['user_id'] == nova_domain.USER_ID
    # Nova 34 writes every extra spec of the flavor, and an empty
    # <nova:extraSpecs/> when there is none.
    assert info['extra_specs'] == specs


def test_the_test_domains_read_like_novas():
    novas = hook.parse_domain(_domain(_nova_metadata(SPECS)).encode())
    ours = hook.parse_domain(nova_domain.add_metadata(
        _domain(), name='server-1', extra_specs=SPECS).encode())
    for key in ('uuid', 'nova', 'flavor', 'project_id', 'user_id',
                'extra_specs'):
        assert ours[key] == novas[key], key
