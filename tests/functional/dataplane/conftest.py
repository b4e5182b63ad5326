import pytest

from tests.functional.compute_node import dataplane
from tests.functional.dataplane import env


@pytest.fixture(scope='module')
def guest(libvirt_conn):
    """The tiny guest, booted once for the module (TCG)."""
    yield from dataplane.running_tiny_guest(libvirt_conn, memory_mib=256)


@pytest.fixture(scope='module')
def shared_tgt():
    return env.Tgt()


@pytest.fixture(scope='module')
def dp(tmp_path_factory, shared_tgt, libvirt_conn):
    """The processes over the machine's tgtd, for the module."""
    stack = env.DataPlaneStack(tmp_path_factory.mktemp('dataplane'),
                               shared_tgt)
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()
