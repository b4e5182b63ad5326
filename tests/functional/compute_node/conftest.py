import pytest

from tests.functional.compute_node import dataplane


@pytest.fixture(scope='module')
def libvirt_conn():
    conn = dataplane.libvirt_connection()
    yield conn
    try:
        conn.close()
    except Exception:
        pass


@pytest.fixture(scope='module')
def tgt():
    daemon = dataplane.TgtDaemon()
    yield daemon
    daemon.stop()


@pytest.fixture(scope='module')
def guest(libvirt_conn):
    """The tiny guest, booted once for the module (TCG: ~10 s here)."""
    from tests.functional.guest import build
    try:
        image = build.build()
    except build.GuestUnavailable as exc:
        dataplane.unavailable(str(exc))
    import libvirt
    guest_cm = build.running_guest(libvirt_conn, image=image)
    try:
        running = guest_cm.__enter__()
    except libvirt.libvirtError as exc:
        dataplane.unavailable('QEMU (TCG) could not start the tiny guest: '
                              '%s' % exc)
    try:
        yield running
    finally:
        guest_cm.__exit__(None, None, None)
