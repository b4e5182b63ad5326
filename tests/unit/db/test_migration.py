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

"""composable.db.migration and the checks of composable-status, on
SQLite."""

import pytest

from composable.common import exception
from composable import conf
from composable.cmd import status
from composable.db import api as dbapi
from composable.db import migration
from tests.unit.db import inventory as inv

CONF = conf.CONF

_SUCCESS = status.upgradecheck.Code.SUCCESS
_WARNING = status.upgradecheck.Code.WARNING
_FAILURE = status.upgradecheck.Code.FAILURE


@pytest.fixture
def empty_db(tmp_path):
    """A database without tables instead of the one the models made."""
    CONF.set_override('connection', 'sqlite:///%s' % (tmp_path / 'e.db'),
                      'database')
    dbapi.reset_facade()


def test_upgrade_stamp_and_version(empty_db):
    assert migration.version() is None
    migration.upgrade()
    assert migration.version() == migration.head()
    migration.upgrade('head')
    assert migration.version() == migration.head()
    migration.stamp('base')
    assert migration.version() is None
    migration.stamp('head')
    assert migration.version() == migration.head()


def test_upgrade_refuses_a_schema_without_version():
    # The default database of these tests was made from the models.
    with pytest.raises(exception.ComposableException) as info:
        migration.upgrade()
    assert 'composable-dbsync stamp %s' % migration.head() in (
        info.value.message)
    assert migration.version() is None


def test_status_schema_check():
    checks = status.Checks()
    result = checks._check_db_schema()
    assert result.code == _FAILURE
    assert 'composable-dbsync upgrade' in result.details
    migration.stamp('head')
    result = checks._check_db_schema()
    assert result.code == _SUCCESS


def test_status_schema_check_without_a_database(tmp_path):
    CONF.set_override('connection',
                      'sqlite:///%s' % (tmp_path / 'no' / 'such' / 'db'),
                      'database')
    dbapi.reset_facade()
    result = status.Checks()._check_db_schema()
    assert result.code == _FAILURE
    assert 'Cannot read the schema version' in result.details


def test_status_fabric_driver_check():
    checks = status.Checks()
    assert checks._check_fabric_drivers().code == _SUCCESS
    inv.fabric('rack1', driver='fake')
    assert checks._check_fabric_drivers().code == _SUCCESS
    inv.fabric('rack2', driver='redfish')
    result = checks._check_fabric_drivers()
    assert result.code == _FAILURE
    assert 'rack2 (driver redfish)' in result.details
    assert 'rack1' not in result.details


def test_status_warns_about_enabled_drivers_not_installed(monkeypatch):
    monkeypatch.setattr(status, '_installed_fabric_drivers',
                        lambda: {'fake'})
    CONF.set_override('enabled_drivers', ['fake', 'ghost'], 'fabric')
    try:
        result = status.Checks()._check_fabric_drivers()
    finally:
        CONF.clear_override('enabled_drivers', 'fabric')
    assert result.code == _WARNING
    assert 'ghost' in result.details
