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


def load():
    """Import Nova's configuration under a private CONF (once)."""
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
    finally:
        cfg.CONF = saved
    nova.conf.CONF([], project='nova', default_config_files=[],
                   default_config_dirs=[])
    return nova.conf.CONF
