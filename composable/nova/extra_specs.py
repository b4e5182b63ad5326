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

"""Validators for flavor extra specs in the ``composable:`` namespace.

Loaded by nova-api through the ``nova.api.extra_spec_validators`` entry
point (``composable = composable.nova.extra_specs``); Nova calls
:func:`register` once at start. From compute API microversion 2.86 on,
nova-api refuses (400) a ``composable:*`` extra spec this module does not
know or whose value is wrong; with an older microversion the keys are
stored unchecked.

What Placement cannot count goes here; what it can count goes into
``resources:CUSTOM_COMPOSABLE_*`` extra specs (pool memory, GPUs, PCI
devices), validated by Nova's own ``resources`` validators.

Runs inside nova-api: imports nothing of composable's service code.
"""

from nova.api.validation.extra_specs import base

NAME_PATTERN = r'[A-Za-z0-9][A-Za-z0-9._-]{0,254}'

EXTRA_SPEC_VALIDATORS = [
    base.ExtraSpecValidator(
        name='composable:attach_mode',
        description=(
            'How pooled memory of a composable lease reaches the instance: '
            '``host`` (the compute host swaps to the remote memory and '
            'the guest\'s cold pages go there; default) or ``guest`` (a '
            'network disk hot-plugged into the guest).'),
        value={
            'type': str,
            'description': 'The attach mode.',
            # composable.common.states.ATTACH_MODES, copied: this module
            # imports nothing of the service.
            'enum': ('host', 'guest'),
        },
    ),
    base.ExtraSpecValidator(
        name='composable:gpu_model',
        description=(
            'The model of the pooled GPUs the instance gets (as the '
            'devices of the composable GPU pool record it, e.g. '
            '``A100``). Placement counts GPUs; the model is matched when '
            'the devices are bound.'),
        value={
            'type': str,
            'description': 'A device model name.',
            'pattern': r'[A-Za-z0-9][A-Za-z0-9 ._+-]{0,254}',
        },
    ),
    base.ExtraSpecValidator(
        name='composable:on_bind_failure',
        description=(
            'What happens when the instance starts and its composable '
            'resources cannot be made available on the host: ``fail`` '
            'the start (default) or ``ignore`` it and start without '
            'them.'),
        value={
            'type': str,
            'description': 'The policy on bind failure.',
            'enum': ('fail', 'ignore'),
        },
    ),
    base.ExtraSpecValidator(
        name='composable:lease_name',
        description=(
            'Name given to the lease composable creates for the instance '
            'from this flavor\'s pool resources (default: derived from '
            'the instance).'),
        value={
            'type': str,
            'description': 'A lease name.',
            'pattern': NAME_PATTERN,
        },
    ),
]


def register():
    return EXTRA_SPEC_VALIDATORS
