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

"""The Placement names of the pools (composable.common.resource_classes)."""

import pytest

from composable.common import resource_classes as rc


def test_names():
    assert rc.MEMORY_MB == 'CUSTOM_COMPOSABLE_MEMORY_MB'
    assert rc.GPU == 'CUSTOM_COMPOSABLE_GPU'
    assert rc.POOL_TRAIT == 'CUSTOM_COMPOSABLE_POOL'
    assert rc.SHARING_TRAIT == 'MISC_SHARES_VIA_AGGREGATE'


@pytest.mark.parametrize('kind,device_class,expected', [
    ('memory', None, 'CUSTOM_COMPOSABLE_MEMORY_MB'),
    ('gpu', None, 'CUSTOM_COMPOSABLE_GPU'),
    ('pci', 'NVME', 'CUSTOM_COMPOSABLE_PCI_NVME'),
    ('pci', 'fpga', 'CUSTOM_COMPOSABLE_PCI_FPGA'),
])
def test_for_pool(kind, device_class, expected):
    assert rc.for_pool(kind, device_class) == expected


@pytest.mark.parametrize('device_kind,expected', [
    (None, ('gpu', 'CUSTOM_COMPOSABLE_GPU')),
    ('gpu', ('gpu', 'CUSTOM_COMPOSABLE_GPU')),
    ('nvme', ('pci', 'CUSTOM_COMPOSABLE_PCI_NVME')),
])
def test_for_device_kind(device_kind, expected):
    assert rc.for_device_kind(device_kind) == expected


def test_custom_names():
    assert rc.is_custom(rc.MEMORY_MB)
    assert not rc.is_custom('MEMORY_MB')
    assert rc.is_custom_trait(rc.POOL_TRAIT)
    assert not rc.is_custom_trait(rc.SHARING_TRAIT)
