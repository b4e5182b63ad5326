from composable.policies import base

rules = base.crud_rules('fabric', 'fabrics', 'fabrics', base.RULE_ADMIN,
                        'fabric')


def list_rules():
    return rules
