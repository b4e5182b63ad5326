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

"""composable-status: pre-upgrade and post-deployment checks.

::

    composable-status [--config-file composable.conf] upgrade check

Checks that the database schema is at the revision this code expects and
that every fabric uses a driver enabled in ``[fabric]enabled_drivers``.
Exit code 0: all good, 1: warnings, 2: failures.
"""

from importlib import metadata
import os
import sys

from oslo_upgradecheck import upgradecheck

from composable.common import context
from composable.common import service
from composable import conf
from composable.conf import database as conf_database
from composable.db import api as db_api
from composable.db import location as db_location
from composable.db import migration

CONF = conf.CONF

FABRIC_DRIVER_NAMESPACE = 'composable.fabric.drivers'

_Code = upgradecheck.Code
_Result = upgradecheck.Result


def _installed_fabric_drivers():
    return {ep.name for ep in
            metadata.entry_points(group=FABRIC_DRIVER_NAMESPACE)}


class Checks(upgradecheck.UpgradeCommands):
    """The checks of ``composable-status upgrade check``."""

    def _check_db_schema(self):
        try:
            current = migration.version()
        except Exception as exc:
            return _Result(
                _Code.FAILURE,
                'Cannot read the schema version from the database given '
                'by [database]connection: %s' % _first_line(exc))
        expected = migration.head()
        if current == expected:
            return _Result(_Code.SUCCESS,
                           'Database schema is at %s.' % current)
        if current is None:
            return _Result(
                _Code.FAILURE,
                'The database has no composable schema; run '
                '"composable-dbsync upgrade".')
        return _Result(
            _Code.FAILURE,
            'The database schema is at %s but this code needs %s; run '
            '"composable-dbsync upgrade" (with this release\'s code) '
            'before starting the services.' % (current, expected))

    def _check_fabric_drivers(self):
        enabled = set(CONF.fabric.enabled_drivers)
        try:
            fabrics = db_api.fabric_list(context.get_admin_context())
        except Exception as exc:
            return _Result(
                _Code.FAILURE,
                'Cannot list the fabrics: %s' % _first_line(exc))
        disabled = sorted('%s (driver %s)' % (fabric.name, fabric.driver)
                          for fabric in fabrics
                          if fabric.driver not in enabled)
        if disabled:
            return _Result(
                _Code.FAILURE,
                'Fabrics use drivers that are not in '
                '[fabric]enabled_drivers: %s. Enable those drivers, or '
                'delete the fabrics, before starting the services.' %
                ', '.join(disabled))
        missing = sorted(enabled - _installed_fabric_drivers())
        if missing:
            return _Result(
                _Code.WARNING,
                '[fabric]enabled_drivers names drivers that are not '
                'installed (no %s entry point): %s.' %
                (FABRIC_DRIVER_NAMESPACE, ', '.join(missing)))
        return _Result(
            _Code.SUCCESS,
            '%d fabric(s), all on enabled drivers.' % len(fabrics))

    def check(self):
        # SQLite makes the file it is asked to open: a check run where no
        # database was ever made would leave an empty one behind.
        missing = _missing_sqlite_file()
        if missing:
            print(missing, file=sys.stderr)
            return _Code.FAILURE
        return super().check()

    _upgrade_checks = (
        ('Database schema', _check_db_schema),
        ('Fabric drivers', _check_fabric_drivers),
    )


def _missing_sqlite_file():
    """The one-line refusal when [database]connection names a SQLite file
    that does not exist, else None."""
    path = db_location.sqlite_path(CONF.database.connection)
    if path is None or os.path.exists(path):
        return None
    return ('composable-status: no database at %s (%s); create it with '
            '"composable-dbsync upgrade" (or start composable-all, which '
            'makes it), or point [database]connection at the existing '
            'one' % (path, conf_database.source(CONF)))


def _first_line(exc):
    text = str(exc).strip()
    return text.splitlines()[0] if text else exc.__class__.__name__


def main(argv=None):
    # A check reports an unreachable database at once instead of retrying
    # for minutes (or forever, with max_retries = -1).
    CONF.set_override('max_retries', 0, group='database')
    try:
        return upgradecheck.main(
            CONF, project='composable', upgrade_command=Checks(),
            argv=sys.argv[1:] if argv is None else argv)
    except service.CONFIG_FILE_ERRORS as exc:
        print(service.config_file_error(exc, 'composable-status'),
              file=sys.stderr)
        return _Code.FAILURE


if __name__ == '__main__':
    sys.exit(main())
