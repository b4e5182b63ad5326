from composable.policies import base

rules = base.crud_rules('memory_node', 'memory nodes', 'memory_nodes',
                        base.RULE_ADMIN, 'memory node')


def list_rules():
    return rules
