"""keystoneauth adapter options shared by the groups of the services
composable calls ([placement], [nova])."""

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

# Left out: the clients pick a microversion per call, and Nova registers
# placeholders under these names in its own [placement] group (tests and
# all-in-one deployments load both).
_VERSION_OPTS = ('version', 'min_version', 'max_version')


def adapter_opts(service_type):
    """The adapter options (endpoint, interface, region ...) for
    ``service_type``, without the version options."""
    adapter = [opt for opt in ks_loading.get_adapter_conf_options(
        include_deprecated=False) if opt.dest not in _VERSION_OPTS]
    cfg.set_defaults(adapter, valid_interfaces=['internal', 'public'],
                     service_type=service_type)
    return adapter
