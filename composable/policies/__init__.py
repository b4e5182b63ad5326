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

"""Policy in code: one module per resource, personas in base.py.

``oslopolicy-sample-generator --namespace composable`` renders the defaults
from :func:`list_rules`; ``oslopolicy-policy-generator`` and friends load
the enforcer from :func:`get_enforcer`.
"""

import inspect
import itertools
import threading
import time

from oslo_config import cfg
from oslo_policy import _checks
from oslo_policy import opts as policy_opts
from oslo_policy import policy

from composable.common import exception
from composable.common import utils
from composable.policies import base
from composable.policies import device
from composable.policies import fabric
from composable.policies import host
from composable.policies import lease
from composable.policies import memory_node
from composable.policies import pool

CONF = cfg.CONF

_ENFORCER = None
_LOCK = threading.Lock()

# Seconds between two looks for a changed or new policy file.
RELOAD_INTERVAL = 1.0

# New defaults and scope checks are on: there are no deprecated rules to
# fall back to in a new service.
policy_opts.set_defaults(CONF, enforce_scope=True,
                         enforce_new_defaults=True)


def list_rules():
    return list(itertools.chain(
        base.list_rules(),
        fabric.list_rules(),
        host.list_rules(),
        memory_node.list_rules(),
        pool.list_rules(),
        device.list_rules(),
        lease.list_rules(),
    ))


class _RememberedArgspecs(object):
    """Stands for the ``inspect`` module in oslo_policy._checks.

    To evaluate a rule, oslo.policy inspects the signature of every check
    in it (to learn whether it takes the rule's name), on every request:
    about two thirds of the cost of an enforce() call, some 100-250 us per
    rule here, and several rules are checked per API request. A check
    class's __call__ never changes while the process runs, so each
    signature is remembered per function; everything else is the real
    module's.
    """

    def __init__(self, module):
        self._module = module
        self.getfullargspec = utils.remembered_per_function(
            module.getfullargspec)

    def __getattr__(self, name):
        return getattr(self._module, name)


def _remember_check_signatures():
    current = getattr(_checks, 'inspect', None)
    if current is inspect:
        _checks.inspect = _RememberedArgspecs(inspect)


_remember_check_signatures()


class _Enforcer(policy.Enforcer):
    """oslo.policy's enforcer, looking for policy file changes at most
    once a second.

    Every enforce() calls load_rules(), which, when no policy file exists
    (the usual case with policy in code), searches every configuration
    directory for the file and for policy.d again: a dozen stat() calls
    per rule checked, about a tenth of the API's CPU time on a busy
    lease API. An operator's new or edited policy file still takes effect
    without a restart, within RELOAD_INTERVAL seconds.
    """

    _loaded_at = None

    def load_rules(self, force_reload=False):
        now = time.monotonic()
        if (not force_reload and self._loaded_at is not None and
                now - self._loaded_at < RELOAD_INTERVAL):
            return
        super().load_rules(force_reload=force_reload)
        self._loaded_at = now

    def clear(self):
        super().clear()
        self._loaded_at = None


def init(conf=None, policy_file=None):
    global _ENFORCER
    with _LOCK:
        if _ENFORCER is None:
            conf = conf or CONF
            # Again here: test fixtures may have unregistered the options.
            policy_opts.set_defaults(conf, enforce_scope=True,
                                     enforce_new_defaults=True)
            enforcer = _Enforcer(conf, policy_file=policy_file)
            enforcer.register_defaults(list_rules())
            _ENFORCER = enforcer
    return _ENFORCER


def reset():
    global _ENFORCER
    with _LOCK:
        if _ENFORCER is not None:
            _ENFORCER.clear()
        _ENFORCER = None


def get_enforcer():
    """The enforcer, for the oslo.policy command line tools."""
    CONF([], project='composable')
    return init(CONF)


def check(rule, context, target=None):
    """True when ``context`` may do ``rule`` on ``target``."""
    target = target or {'project_id': context.project_id}
    try:
        return init().enforce(rule, target, context, do_raise=False)
    except policy.InvalidScope:
        return False


def authorize(rule, context, target=None):
    """Raise Forbidden unless ``context`` may do ``rule`` on ``target``.

    The target defaults to the caller's own project: resources that belong
    to no project (fabrics, pools ...) are checked that way.
    """
    target = target or {'project_id': context.project_id}
    try:
        init().authorize(rule, target, context, do_raise=True,
                         exc=exception.Forbidden, action=rule)
    except policy.InvalidScope:
        raise exception.Forbidden(action=rule)
