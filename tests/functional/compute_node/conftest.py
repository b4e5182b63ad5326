import pytest

from tests.functional.compute_node import dataplane


@pytest.fixture(scope='module')
def tgt():
    daemon = dataplane.TgtDaemon()
    yield daemon
    daemon.stop()


@pytest.fixture(scope='module')
def guest(libvirt_conn):
    """The tiny guest, booted once for the module (TCG: ~10 s here)."""
    yield from dataplane.running_tiny_guest(libvirt_conn)
