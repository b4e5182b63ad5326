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

"""Host-mode memory tuning of the guests (composable.agent.compute_node.
memory_tuning), against a fake libvirt domain; the real libvirtd is in
tests/functional/compute_node/test_memory_tuning_real.py."""

import pytest

from composable.agent.compute_node import memory_tuning

GUEST_KIB = 4 * 1024 * 1024


class FakeDomain(object):
    def __init__(self, fail=False):
        self.soft_limit = memory_tuning.UNLIMITED_KIB
        self.fail = fail
        self.flags = []

    def maxMemory(self):
        return GUEST_KIB

    def setMemoryParameters(self, params, flags):
        if self.fail:
            raise RuntimeError('cgroup memory controller not mounted')
        self.flags.append(flags)
        self.soft_limit = params['soft_limit']


class FakeDomains(object):
    def __init__(self, domains):
        self.domains = domains

    def domain(self, instance_uuid, missing_ok=False):
        assert missing_ok
        return self.domains.get(instance_uuid)


@pytest.mark.parametrize('leased_mb,expected', [
    (0, memory_tuning.UNLIMITED_KIB),
    (1024, GUEST_KIB - 1024 * 1024),
    # Never below the floor (25 % of 4 GiB).
    (8192, GUEST_KIB // 4),
])
def test_soft_limit(leased_mb, expected):
    assert memory_tuning.soft_limit_kib(GUEST_KIB, leased_mb, 25) == expected


def test_limit_follows_the_leases_of_the_instance():
    dom = FakeDomain()
    tuner = memory_tuning.GuestMemoryTuner(FakeDomains({'i1': dom}),
                                           min_resident_percent=25)
    assert tuner.apply('i1', 'lease-a', 1024) == GUEST_KIB - 1024 * 1024
    assert tuner.apply('i1', 'lease-b', 512) == GUEST_KIB - 1536 * 1024
    # Applying a lease again (a retried bind) does not count it twice.
    assert tuner.apply('i1', 'lease-b', 512) == GUEST_KIB - 1536 * 1024
    assert tuner.leased_mb('i1') == 1536
    assert tuner.clear('i1', 'lease-a') == GUEST_KIB - 512 * 1024
    assert tuner.clear('i1', 'lease-b') == memory_tuning.UNLIMITED_KIB
    assert dom.soft_limit == memory_tuning.UNLIMITED_KIB
    # Live only: Nova owns the persistent definition.
    assert set(dom.flags) == {memory_tuning.VIR_DOMAIN_AFFECT_LIVE}
    assert tuner.leased_mb('i1') == 0


def test_no_domain_or_a_libvirt_refusal_is_not_fatal(caplog):
    broken = FakeDomain(fail=True)
    tuner = memory_tuning.GuestMemoryTuner(FakeDomains({'i2': broken}),
                                           min_resident_percent=25)
    assert tuner.apply('gone', 'lease-a', 1024) is None
    assert tuner.apply('i2', 'lease-a', 1024) is None
    assert 'cgroup memory controller not mounted' in caplog.text
    # Still counted: the next bind or start sets it.
    assert tuner.leased_mb('i2') == 1024
