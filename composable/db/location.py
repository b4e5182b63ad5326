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

"""Where composable's state lives: the SQLite file ``[database]connection``
names, or the URL of its database server, as the commands say it and
create it. (In the database layer: parsing the URL is SQLAlchemy's.)
"""

import os

from sqlalchemy.engine import url as sa_url

from composable.conf import database as conf_database


def sqlite_path(connection):
    """The absolute path of the SQLite file ``connection`` names, or None
    (not SQLite, or an in-memory database)."""
    if not connection or not connection.startswith('sqlite'):
        return None
    path = sa_url.make_url(connection).database
    if not path or path == ':memory:' or path.startswith('file:'):
        return None
    return os.path.abspath(path)


def describe(conf):
    """Where the state lives, for the log: the SQLite file's absolute
    path, or the URL without its password; and where that comes from."""
    connection = conf.database.connection or ''
    path = sqlite_path(connection)
    if path:
        where = 'SQLite database %s' % path
    else:
        try:
            where = sa_url.make_url(connection).render_as_string(
                hide_password=True)
        except Exception:
            where = connection.split('://', 1)[0] + '://...'
    return '%s (%s)' % (where, conf_database.source(conf))


def ensure_state_dir(conf):
    """Create the directory of the SQLite file ``[database]connection``
    names (owner only), for the commands that create the database."""
    path = sqlite_path(conf.database.connection)
    if path:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    return path
