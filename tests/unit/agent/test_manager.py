import logging

import pytest

from composable.agent import manager
from composable.common import exception
from composable.memory.exporters import noop

EXTENT = {'uuid': 'e1', 'index': 0, 'size_mb': 1024, 'lease_uuid': 'l1',
          'memory_node': 'memory-0', 'portal': '10.0.0.5:3260',
          'transport': 'tcp'}
LEASE = {'uuid': 'l1'}


def test_memory_node_exports_with_noop(caplog):
    caplog.set_level(logging.DEBUG)
    agent = manager.AgentManager('memory-0', ['memory_node'])
    assert isinstance(agent.exporter, noop.NoopExporter)
    result = agent.export_extent(None, EXTENT, 'iqn.x:host', 'user',
                                 'very-secret-value')
    assert result['target_iqn'].endswith('e1')
    assert result['portal'] == '10.0.0.5:3260'
    assert result == agent.export_extent(None, EXTENT, 'iqn.x:host', 'user',
                                         'very-secret-value')
    assert 'noop exporter: nothing is exported' in caplog.text
    assert 'very-secret-value' not in caplog.text
    agent.unexport_extent(None, EXTENT)
    agent.unexport_extent(None, EXTENT)
    assert agent.exporter.exports == {}
    assert agent.exporter.backed == {'e1'}
    agent.scrub_extent(None, EXTENT)
    agent.scrub_extent(None, EXTENT)
    assert agent.exporter.backed == set()


def test_compute_node_attach_detach(caplog):
    caplog.set_level(logging.DEBUG)
    agent = manager.AgentManager('compute-0', ['compute_node'])
    extent = dict(EXTENT, target_iqn='iqn.t:e1', lun=1,
                  chap_username='u', chap_secret='very-secret-value')
    details = agent.attach_memory(None, LEASE, [extent], 'host', None)
    assert details['e1']['device'].startswith('/dev/disk/by-path/')
    assert 'very-secret-value' not in caplog.text
    agent.detach_memory(None, LEASE, [extent], 'host', None)
    agent.detach_memory(None, LEASE, [extent], 'host', None)
    assert agent.memory_attachments == {}
    devices = [{'uuid': 'd1', 'pci_address': '0000:41:00.0'}]
    assert agent.attach_devices(None, LEASE, devices) == {
        'd1': '0000:41:00.0'}
    agent.detach_devices(None, LEASE, devices)
    assert agent.device_attachments == {}


@pytest.mark.parametrize('roles,method,args', [
    (['compute_node'], 'export_extent', (EXTENT, 'iqn', 'u', 's')),
    (['compute_node'], 'scrub_extent', (EXTENT,)),
    (['memory_node'], 'attach_memory', (LEASE, [EXTENT], 'host', None)),
    (['memory_node'], 'attach_devices', (LEASE, [])),
])
def test_refuses_a_role_it_does_not_have(roles, method, args):
    agent = manager.AgentManager('node-x', roles)
    with pytest.raises(exception.DriverError) as info:
        getattr(agent, method)(None, *args)
    assert 'node-x' in info.value.message
    assert 'role' in info.value.message


def test_unknown_role_is_refused():
    with pytest.raises(exception.Invalid):
        manager.AgentManager('node-x', ['gpu_node'])
