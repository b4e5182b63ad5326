"""The privilege separation context of composable-agent.

Everything composable does as root runs in functions decorated with
``@sys_admin_pctxt.entrypoint`` in this package, inside the oslo.privsep
daemon, with only the capabilities listed here. Nothing else lives in this
package. The daemon is started through ``[composable_sys_admin]
helper_command`` (by default ``sudo privsep-helper``).
"""

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
