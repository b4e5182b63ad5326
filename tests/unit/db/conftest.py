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

"""Every test here runs on a new SQLite file database with the schema of
the models."""

import pytest

from composable import conf
from composable.db import api as dbapi

CONF = conf.CONF


@pytest.fixture(autouse=True)
def sqlite_db(tmp_path):
    CONF.set_override('connection',
                      'sqlite:///%s' % (tmp_path / 'composable.sqlite'),
                      'database')
    dbapi.reset_facade()
    dbapi.create_schema_for_tests()
    yield
    dbapi.reset_facade()
    CONF.clear_override('connection', 'database')
