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

from composable.conf import compute
from composable.conf import opts


def test_default_initiator_iqn_from_the_host_name():
    assert compute.default_initiator_iqn('Compute_1.Example.org') == (
        'iqn.2010-10.org.openstack.composable:compute-1.example.org')
    assert compute.default_initiator_iqn('-') == (
        'iqn.2010-10.org.openstack.composable:localhost')


def test_options_are_registered_and_listed():
    from composable.conf import CONF
    assert CONF.compute_node.libvirt_uri == 'qemu:///system'
    assert CONF.compute_node.initiator_iqn.startswith(compute.IQN_PREFIX)
    assert CONF.compute_node.iscsi_replacement_timeout == 86400
    listed = {group.name if hasattr(group, 'name') else group:
              [o.name for o in group_opts]
              for group, group_opts in opts.list_opts()}
    assert set(listed['compute_node']) >= {
        'libvirt_uri', 'initiator_iqn', 'swap_priority', 'attach_timeout',
        'detach_timeout', 'iscsi_replacement_timeout'}


def test_pci_options_are_registered_and_listed():
    from composable.conf import CONF
    assert CONF.compute_node.pci_backend is None
    assert CONF.compute_node.pci_find_timeout == 60
    assert CONF.compute_node.nova_config_files == ['/etc/nova/nova.conf']
    assert CONF.compute_node.sriov_numvfs == []
    listed = [(group.name if hasattr(group, 'name') else group,
               [o.name for o in group_opts])
              for group, group_opts in opts.list_opts()]
    # One [compute_node] section in the sample, holding both lists.
    names = [n for g, o in listed if g == 'compute_node' for n in o]
    assert [g for g, _o in listed].count('compute_node') == 1
    assert set(names) >= {'pci_backend', 'pci_find_timeout',
                          'nova_config_files', 'pci_state_file',
                          'sriov_numvfs', 'initiator_iqn'}
