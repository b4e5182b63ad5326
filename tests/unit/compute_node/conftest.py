import pytest

from composable.agent.compute_node import libvirt_guest
from tests.unit.compute_node import fakes


@pytest.fixture(autouse=True)
def fake_guest_agents(monkeypatch):
    """Guest agent commands reach the fake domains' agents (the libvirt
    binding's libvirt_qemu cannot talk to a FakeDomain)."""
    monkeypatch.setattr(libvirt_guest, 'libvirt_qemu', fakes.FakeLibvirtQemu)
