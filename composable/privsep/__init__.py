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

"""The privilege separation context of composable-agent and of the
conductor (its fabric commands).

Everything composable does as root runs in functions decorated with
``@sys_admin_pctxt.entrypoint`` in this package, inside the oslo.privsep
daemon, with only the capabilities listed here. Nothing else lives in this
package. The daemon is started through ``[composable_sys_admin]
helper_command`` (by default ``sudo privsep-helper``).
"""

import math

from oslo_privsep import capabilities
from oslo_privsep import priv_context

sys_admin_pctxt = priv_context.PrivContext(
    'composable',
    cfg_section='composable_sys_admin',
    pypath=__name__ + '.sys_admin_pctxt',
    capabilities=[capabilities.CAP_SYS_ADMIN,
                  capabilities.CAP_DAC_OVERRIDE,
                  capabilities.CAP_CHOWN,
                  capabilities.CAP_FOWNER,
                  capabilities.CAP_NET_ADMIN],
)


# No privileged command may run longer than this, whatever it is asked.
MAX_TIMEOUT = 3600.0


def timeout_seconds(timeout, default):
    """A command's time limit in seconds: ``default`` when not given;
    refuses a limit that is not a finite positive number of at most
    MAX_TIMEOUT (a command run with no limit could hold a privileged
    worker forever)."""
    if timeout is None:
        return default
    timeout = float(timeout)
    if not math.isfinite(timeout) or timeout <= 0:
        raise ValueError('a timeout must be a finite positive number')
    if timeout > MAX_TIMEOUT:
        raise ValueError('a timeout must be at most %d seconds' %
                         MAX_TIMEOUT)
    return timeout
