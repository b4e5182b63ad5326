"""Shared fixtures of the functional tests.

``db_backend``: runs a test once per database backend (``sqlite``,
``mysql``, ``postgresql``) with ``[database]connection`` pointing at a
fresh, uniquely named database whose schema the migrations brought to
head, and yields its URL. The database is dropped after the test.
A backend whose server does not answer is skipped, or fails when
``COMPOSABLE_REQUIRE_DBS=1``. See tests/functional/fixtures.py for the
building blocks and the environment variables that pick the servers.

``libvirt_conn``: a connection to the system libvirtd (started if need
be), for the modules that run guests.
"""

import pytest

from tests.functional import fixtures as db_fixtures


@pytest.fixture(params=db_fixtures.BACKENDS)
def db_backend(request, tmp_path):
    with db_fixtures.database(request.param, tmpdir=str(tmp_path)) as url:
        yield url


@pytest.fixture(scope='module')
def libvirt_conn():
    from tests.functional.compute_node import dataplane
    conn = dataplane.libvirt_connection()
    yield conn
    try:
        conn.close()
    except Exception:
        pass
