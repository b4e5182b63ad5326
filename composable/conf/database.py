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

"""[database]: oslo.db's options, with composable's default.

Unless ``[database]connection`` is set, the state is one SQLite file in
the user's state directory (XDG): ``$XDG_STATE_HOME/composable/
composable.sqlite``, or ``~/.local/state/composable/composable.sqlite``
when XDG_STATE_HOME is unset. The same file whatever directory a command
starts from.
"""

import os

from oslo_config import cfg
from oslo_db import options as db_options

STATE_FILE = 'composable.sqlite'
SAMPLE_CONNECTION = 'sqlite:///<XDG_STATE_HOME>/composable/' + STATE_FILE


def state_dir(environ=None):
    """$XDG_STATE_HOME/composable, or ~/.local/state/composable. The XDG
    specification says a relative XDG_STATE_HOME is to be ignored."""
    environ = os.environ if environ is None else environ
    base = environ.get('XDG_STATE_HOME') or ''
    if not os.path.isabs(base):
        home = environ.get('HOME') or os.path.expanduser('~')
        base = os.path.join(home, '.local', 'state')
    return os.path.join(base, 'composable')


def default_connection(environ=None):
    return 'sqlite:///' + os.path.join(state_dir(environ), STATE_FILE)


def _set_defaults(conf):
    db_options.set_defaults(conf, connection=default_connection())
    # The generated sample shows where the file goes, not this machine's
    # home directory.
    for opt in db_options.database_opts:
        if opt.dest == 'connection':
            opt.sample_default = SAMPLE_CONNECTION


def register_opts(conf):
    _set_defaults(conf)


def list_opts():
    return {'database': db_options.database_opts}


def set_defaults(conf=None):
    _set_defaults(conf or cfg.CONF)


def source(conf):
    """Where [database]connection's value comes from, in words."""
    location = conf.get_location('connection', 'database')
    if location is None or location.location in (
            cfg.Locations.opt_default, cfg.Locations.set_default):
        return 'the default; set [database]connection to change it'
    if location.detail:
        return '[database]connection in %s' % location.detail
    return '[database]connection'
