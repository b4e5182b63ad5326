from composable.policies import base

rules = base.crud_rules('device', 'devices', 'devices', base.RULE_ADMIN,
                        'device')


def list_rules():
    return rules
