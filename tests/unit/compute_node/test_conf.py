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
