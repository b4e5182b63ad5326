"""Memory exporters, loaded by name from the composable.memory.exporters
entry point (``[agent]memory_exporter``)."""

from oslo_log import log as logging
from stevedore import driver as stevedore_driver

from composable.common import exception

LOG = logging.getLogger(__name__)

NAMESPACE = 'composable.memory.exporters'


def get_exporter(name, node_name):
    try:
        manager = stevedore_driver.DriverManager(
            NAMESPACE, name, invoke_on_load=True,
            invoke_args=(node_name,))
    except Exception as exc:
        LOG.error('Cannot load memory exporter %(name)s: %(exc)s',
                  {'name': name, 'exc': exc})
        raise exception.DriverError(
            reason='memory exporter %s could not be loaded; check '
                   '[agent]memory_exporter' % name)
    return manager.driver
