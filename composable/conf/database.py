from oslo_config import cfg
from oslo_db import options as db_options

_DEFAULT_SQL_CONNECTION = 'sqlite:///composable.sqlite'


def register_opts(conf):
    db_options.set_defaults(conf, connection=_DEFAULT_SQL_CONNECTION)


def list_opts():
    return {'database': db_options.database_opts}


def set_defaults(conf=None):
    db_options.set_defaults(conf or cfg.CONF,
                            connection=_DEFAULT_SQL_CONNECTION)
