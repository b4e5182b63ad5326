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

"""The tests of composable.db.api in tests/unit/db, run again on MariaDB
and PostgreSQL: duplicate detection, refusals, counters, scoping and
pagination must not depend on the database."""

import pytest

from tests.functional import fixtures as db_fixtures
from tests.unit.db import test_api_inventory as test_inventory
from tests.unit.db import test_api_leases as test_leases


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
