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

"""The composable: extra spec validators, through Nova's own registry
(loaded from the nova.api.extra_spec_validators entry point)."""

from nova.api.validation.extra_specs import validators
from nova import exception
import pytest

from composable.nova import extra_specs


def test_loaded_by_nova_from_the_entry_point():
    names = {v.name for v in extra_specs.register()}
    assert names == {'composable:attach_mode', 'composable:gpu_model',
                     'composable:on_bind_failure', 'composable:lease_name'}
    for name in names:
        assert validators.VALIDATORS[name].name == name
    assert 'composable' in validators.NAMESPACES


@pytest.mark.parametrize('name,value', [
    ('composable:attach_mode', 'host'),
    ('composable:attach_mode', 'guest'),
    ('composable:gpu_model', 'A100'),
    ('composable:gpu_model', 'Tesla V100-SXM2 32GB'),
    ('composable:on_bind_failure', 'fail'),
    ('composable:on_bind_failure', 'ignore'),
    ('composable:lease_name', 'db-cache_1.x'),
])
def test_good_values_pass(name, value):
    validators.validate(name, value)


@pytest.mark.parametrize('name,value,message', [
    ('composable:attach_mode', 'bogus', "is not one of: host, guest"),
    ('composable:attach_mode', '', "is not one of"),
    ('composable:on_bind_failure', 'retry', "is not one of: fail, ignore"),
    ('composable:gpu_model', '', "is not of the format"),
    ('composable:gpu_model', 'A100;rm', "is not of the format"),
    ('composable:lease_name', 'has space', "is not of the format"),
    ('composable:lease_name', 'x' * 256, "is not of the format"),
    ('composable:unknown', 'x', "does not appear to be a valid extra spec"),
])
def test_bad_values_are_refused(name, value, message):
    with pytest.raises(exception.ValidationError) as err:
        validators.validate(name, value)
    assert message in str(err.value)


def test_other_namespaces_are_not_affected():
    validators.validate('resources:CUSTOM_COMPOSABLE_MEMORY_MB', '4096')
    validators.validate('trait:CUSTOM_COMPOSABLE_POOL', 'required')
    validators.validate('somebody:else', 'anything')
