from composable.policies import base

# Nova's side of composable looks hosts up to bind leases of its instances.
rules = base.crud_rules('host', 'hosts', 'hosts', base.RULE_ADMIN, 'host',
                        overrides={'get': base.ADMIN_OR_SERVICE,
                                   'list': base.ADMIN_OR_SERVICE})


def list_rules():
    return rules
