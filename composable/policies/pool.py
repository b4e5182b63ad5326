from composable.policies import base

rules = base.crud_rules('pool', 'pools', 'pools', base.RULE_ADMIN, 'pool',
                        overrides={'get': base.ANY_READER,
                                   'list': base.ANY_READER})


def list_rules():
    return rules
