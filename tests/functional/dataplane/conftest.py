import pytest

from tests.functional.compute_node import dataplane
from tests.functional.dataplane import env


@pytest.fixture(scope='module')
def libvirt_conn():
    conn = dataplane.libvirt_connection()
    yield conn
    try:
        conn.close()
    except Exception:
        pass


@pytest.fixture(scope='module')
def guest(libvirt_conn):
    """The tiny guest, booted once for the module (TCG)."""
    from tests.functional.guest import build
    import libvirt
    try:
        image = build.build()
    except build.GuestUnavailable as exc:
        dataplane.unavailable(str(exc))
    guest_cm = build.running_guest(libvirt_conn, image=image,
                                   memory_mib=256)
    try:
        running = guest_cm.__enter__()
    except libvirt.libvirtError as exc:
        dataplane.unavailable('QEMU (TCG) could not start the tiny guest: '
                              '%s' % exc)
    try:
        yield running
    finally:
        guest_cm.__exit__(None, None, None)


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
