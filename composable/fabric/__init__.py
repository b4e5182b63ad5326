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

"""Fabric drivers, loaded by name from the composable.fabric.drivers entry
point. Only the drivers listed in ``[fabric]enabled_drivers`` are loaded."""

import threading

from oslo_log import log as logging
from stevedore import driver as stevedore_driver

from composable.common import exception
from composable import conf

CONF = conf.CONF
LOG = logging.getLogger(__name__)

NAMESPACE = 'composable.fabric.drivers'

_DRIVERS = {}
_LOCK = threading.Lock()


def get_driver(name):
    """The (shared) instance of fabric driver ``name``.

    Raises DriverError when the driver is not enabled or cannot be loaded:
    a fabric registered with a driver the operator later disabled must
    fail its leases' operations with a message saying why.
    """
    if name not in CONF.fabric.enabled_drivers:
        raise exception.DriverError(
            reason='fabric driver %s is not enabled on this conductor; add '
                   'it to [fabric]enabled_drivers' % name)
    with _LOCK:
        if name not in _DRIVERS:
            try:
                manager = stevedore_driver.DriverManager(
                    NAMESPACE, name, invoke_on_load=True)
            except Exception as exc:
                LOG.error('Cannot load fabric driver %(name)s: %(exc)s',
                          {'name': name, 'exc': exc})
                raise exception.DriverError(
                    reason='fabric driver %s could not be loaded' % name)
            _DRIVERS[name] = manager.driver
        return _DRIVERS[name]


def reset():
    """Forget loaded drivers (tests, configuration reload)."""
    with _LOCK:
        _DRIVERS.clear()
