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

"""rules.check_cxl_unbind: CXL memory leaves a compute node only when
what its instances hold of MEMORY_MB still fits without it."""

import types

import pytest

from composable.common import exception
from composable.conductor import rules

LEASE = types.SimpleNamespace(uuid='9d1c8f4e-0000-4000-8000-000000000001',
                              memory_mb=1024)


@pytest.mark.parametrize('inventory, used', [
    # (total - size - reserved) x ratio = (4096 - 1024 - 512) x 1 = 2560
    ({'total': 4096, 'reserved': 512, 'allocation_ratio': 1.0}, 2560),
    ({'total': 4096, 'reserved': 512, 'allocation_ratio': 1.0}, 0),
    # (4096 - 1024 - 0) x 1.5 = 4608: over-commit counts.
    ({'total': 4096, 'reserved': 0, 'allocation_ratio': 1.5}, 4608),
    # reserved and ratio absent: 0 and 1.
    ({'total': 2048}, 1024),
])
def test_fits(inventory, used):
    assert rules.check_cxl_unbind(LEASE, 'cn1', inventory, used) is None


def test_refused_with_the_numbers():
    with pytest.raises(exception.HostMemoryInUse) as err:
        rules.check_cxl_unbind(
            LEASE, 'cn1', {'total': 4096, 'reserved': 512,
                           'allocation_ratio': 1.0}, 2561)
    assert err.value.code == 409
    assert err.value.error_code == 'composable.lease.host_memory_in_use'
    message = str(err.value)
    for words in ('lease %s gives compute node cn1 1024 MiB' % LEASE.uuid,
                  'they use 2561 MiB', 'total 4096 MiB', 'reserved 512 MiB',
                  'allocation ratio 1', 'would offer 2560 MiB',
                  'at least 1 MiB'):
        assert words in message, message


def test_ratio_applies_to_what_remains():
    inventory = {'total': 4096, 'reserved': 0, 'allocation_ratio': 1.5}
    with pytest.raises(exception.HostMemoryInUse) as err:
        rules.check_cxl_unbind(LEASE, 'cn1', inventory, 4609)
    assert 'would offer 4608 MiB' in str(err.value)


def test_more_than_remains_at_all():
    # The lease is more than the total less reserved: nothing remains,
    # and any usage is refused.
    inventory = {'total': 1024, 'reserved': 512}
    rules.check_cxl_unbind(LEASE, 'cn1', inventory, 0)
    with pytest.raises(exception.HostMemoryInUse) as err:
        rules.check_cxl_unbind(LEASE, 'cn1', inventory, 1)
    assert 'would offer 0 MiB' in str(err.value)
