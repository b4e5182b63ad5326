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

"""Load Nova next to composable in one test process.

Nova and composable both register options in oslo.config's global CONF,
and some of them clash (``[DEFAULT] host``, ``[api] max_limit``,
``[conductor] workers``): in production they never share a process, in
a test run they do. So Nova is imported with a private ConfigOpts in
place of the global one; every Nova module (and the Nova-side plugins of
composable, which use ``nova.conf.CONF``) binds to that one, composable
keeps the global one.

Importing ``nova.tests.functional`` also monkey-patches the process
with eventlet, which composable's threads must not get: Nova is told to
run in native threading mode instead, as nova-scheduler does.
"""

import os
import sys

from oslo_config import cfg
from sqlalchemy import event as sqlalchemy_event


# Nova modules that bind ``cfg.CONF`` when imported: imported here, under
# Nova's CONF, before anything else imports them.
FUNCTIONAL_MODULES = (
    'nova.test',
    'nova.tests.fixtures',
    'nova.tests.functional.integrated_helpers',
    'nova.tests.functional.fixtures',
    'nova.api.openstack.wsgi_app',
    'nova.api.openstack.compute.routes',
    'nova.compute.manager',
    'nova.conductor.manager',
    'nova.scheduler.manager',
    'nova.scheduler.weights.affinity',
    'nova.virt.fake',
    'nova.virt.storage_users',
    'nova.network.os_vif_util',
)


def load():
    """Import Nova's configuration under a private CONF (once), with the
    modules of Nova's functional tests (they register command-line
    options, which must happen before the configuration is parsed)."""
    if 'nova.conf' in sys.modules:
        return sys.modules['nova.conf'].CONF
    os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', '1')
    from nova import monkey_patch
    if not monkey_patch.is_patched():
        # composable imports eventlet (through oslo.messaging) without
        # using it, which Nova's threading mode refuses; skip Nova's
        # patching decision and select the threading backend directly.
        import oslo_service.backend as service_backend
        try:
            service_backend.init_backend(
                service_backend.BackendType.THREADING)
        except Exception:  # already selected
            pass
        monkey_patch.patch = lambda *args, **kwargs: None
    saved = cfg.CONF
    cfg.CONF = cfg.ConfigOpts()
    try:
        import nova.conf
        from nova import objects
        from nova.scheduler import filters  # noqa: F401
        from nova.scheduler import host_manager  # noqa: F401
        objects.register_all()
        import composable.nova.scheduler  # noqa: F401
        import composable.nova.extra_specs  # noqa: F401
        import importlib
        for name in FUNCTIONAL_MODULES:
            importlib.import_module(name)
    finally:
        cfg.CONF = saved
    return nova.conf.CONF


class NovaConf(object):
    """While a Nova test runs, ``cfg.CONF`` is Nova's (for code that looks
    it up at call time). With ``parse``, Nova's configuration is parsed
    (empty) for the test and reset after it (Nova's own functional tests
    do that themselves)."""

    def __init__(self, conf, parse=False):
        self.conf = conf
        self.parse = parse

    def __enter__(self):
        self.hooks = _composable_sqlite_hooks()
        for target, name, fn in self.hooks:
            sqlalchemy_event.remove(target, name, fn)
        self.saved = cfg.CONF
        cfg.CONF = self.conf
        if self.parse:
            self.conf([], project='nova', default_config_files=[],
                      default_config_dirs=[])
        return self.conf

    def __exit__(self, *exc):
        if self.parse:
            self.conf.reset()
        cfg.CONF = self.saved
        for target, name, fn in self.hooks:
            sqlalchemy_event.listen(target, name, fn)


def _composable_sqlite_hooks():
    """composable.db.api listens on *every* SQLite connection of the
    process (foreign keys on, BEGIN IMMEDIATE for each transaction);
    Nova's and Placement's file-backed SQLite test databases, used from
    several threads, then lock up ("database is locked"). The hooks are
    taken off while a Nova test runs."""
    api = sys.modules.get('composable.db.api')
    if api is None:
        return []
    import sqlalchemy as sa
    hooks = [(sa.pool.Pool, 'connect', api._sqlite_on_connect),
             (sa.engine.Engine, 'begin', api._sqlite_on_begin)]
    return [hook for hook in hooks if sqlalchemy_event.contains(*hook)]
