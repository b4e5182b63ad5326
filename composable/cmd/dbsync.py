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

"""composable-dbsync: create and upgrade the database schema.

::

    composable-dbsync [--config-file composable.conf] upgrade [--revision X]
    composable-dbsync version
    composable-dbsync stamp REVISION

``upgrade`` brings the schema to the latest revision (or to ``X``) and may
be run again at any time: at that revision it changes nothing. ``version``
prints the revision the database is at ("None" for a database without
schema). ``stamp`` records a revision without running any migration.
"""

import logging
import sys

from alembic import util as alembic_util
from oslo_config import cfg
from oslo_db import exception as db_exc

from composable.common import exception
from composable.common import service
from composable import conf
from composable.db import location as db_location
from composable.db import migration

CONF = conf.CONF


def do_upgrade():
    migration.upgrade(CONF.command.revision)
    print('Database schema upgraded to %s.' % migration.version())


def do_version():
    # Only the revision on standard output, for scripts.
    logging.getLogger('alembic').setLevel(logging.WARNING)
    print(migration.version())


def do_stamp():
    migration.stamp(CONF.command.revision)
    print('Database schema stamped as %s.' % migration.version())


def add_command_parsers(subparsers):
    parser = subparsers.add_parser(
        'upgrade', help='Upgrade the database schema to the latest version '
                        '(or to --revision).')
    parser.add_argument('--revision', default='head',
                        help='Revision to upgrade to (default: head).')
    parser.set_defaults(func=do_upgrade)

    parser = subparsers.add_parser(
        'version', help='Print the revision the database schema is at.')
    parser.set_defaults(func=do_version)

    parser = subparsers.add_parser(
        'stamp', help='Record a revision as the schema version without '
                      'running any migration.')
    parser.add_argument('revision', help='Revision id, or "head".')
    parser.set_defaults(func=do_stamp)


command_opt = cfg.SubCommandOpt('command',
                                title='Command',
                                help='Available commands',
                                handler=add_command_parsers)


def main(argv=None):
    CONF.register_cli_opt(command_opt)
    service.prepare_service(sys.argv[1:] if argv is None else argv)
    # Only the commands that write make the default SQLite file's
    # directory (the user's state directory).
    if CONF.command.name in ('upgrade', 'stamp'):
        db_location.ensure_state_dir(CONF)
    try:
        CONF.command.func()
    except exception.ComposableException as exc:
        print('ERROR: %s' % exc.message, file=sys.stderr)
        return 1
    except alembic_util.CommandError as exc:
        print('ERROR: %s' % exc, file=sys.stderr)
        return 1
    except db_exc.DBError as exc:
        print('ERROR: cannot use the database of [database]connection, '
              '%s: %s' % (db_location.describe(CONF), _first_line(exc)),
              file=sys.stderr)
        return 1
    return 0


def _first_line(exc):
    text = str(exc).strip()
    return text.splitlines()[0] if text else exc.__class__.__name__


if __name__ == '__main__':
    sys.exit(main())
