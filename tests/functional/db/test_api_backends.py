"""The tests of composable.db.api in tests/unit/db, run again on MariaDB
and PostgreSQL: duplicate detection, refusals, counters, scoping and
pagination must not depend on the database."""

import pytest

from tests.functional import fixtures as db_fixtures
from tests.unit.db import test_inventory
from tests.unit.db import test_leases


@pytest.fixture(autouse=True,
                params=[b for b in db_fixtures.BACKENDS if b != 'sqlite'])
def server_db(request):
    with db_fixtures.database(request.param) as url:
        yield url


def _adopt(module):
    for name, value in vars(module).items():
        if name.startswith('test_') and callable(value):
            globals()[name] = value


_adopt(test_inventory)
_adopt(test_leases)
