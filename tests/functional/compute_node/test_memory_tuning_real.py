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

"""Host-mode memory tuning against the real libvirtd: the soft limit of a
running QEMU (TCG) domain follows the host-mode leases of its instance,
as ``virsh memtune`` reads it back.

The domain boots no OS (no disk): the limit is the domain's cgroup, so
what the guest does inside does not matter here.
"""

import subprocess
import uuid

import pytest

from composable.agent.compute_node import libvirt_guest
from composable.agent.compute_node import memory_tuning

GUEST_MIB = 256

DOMAIN_XML = """<domain type='qemu'>
  <name>composable-memtune-%(short)s</name>
  <uuid>%(uuid)s</uuid>
  <memory unit='MiB'>%(mib)d</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices><serial type='pty'/></devices>
</domain>"""


def _memtune_soft_limit(instance_uuid):
    out = subprocess.run(
        ['virsh', '-c', 'qemu:///system', 'memtune', instance_uuid],
        check=True, capture_output=True, text=True, timeout=30).stdout
    for line in out.splitlines():
        key, _, value = line.partition(':')
        if key.strip() == 'soft_limit':
            value = value.strip()
            return None if value == 'unlimited' else int(value)
    raise AssertionError('virsh memtune printed no soft_limit: %s' % out)


@pytest.fixture
def domain(libvirt_conn):
    instance = str(uuid.uuid4())
    dom = libvirt_conn.createXML(DOMAIN_XML % {
        'short': instance[:8], 'uuid': instance, 'mib': GUEST_MIB}, 0)
    try:
        yield instance
    finally:
        try:
            dom.destroy()
        except Exception:
            pass


def test_soft_limit_follows_the_host_mode_leases(domain):
    tuner = memory_tuning.GuestMemoryTuner(
        libvirt_guest.GuestMemoryAttacher(uri='qemu:///system'),
        min_resident_percent=25)
    assert _memtune_soft_limit(domain) is None
    tuner.apply(domain, 'lease-a', 64)
    assert _memtune_soft_limit(domain) == (GUEST_MIB - 64) * 1024
    tuner.apply(domain, 'lease-b', 32)
    assert _memtune_soft_limit(domain) == (GUEST_MIB - 96) * 1024
    # A lease larger than the guest: the floor, 25 % of its memory.
    tuner.apply(domain, 'lease-c', 4096)
    assert _memtune_soft_limit(domain) == GUEST_MIB * 1024 // 4
    for lease in ('lease-c', 'lease-a'):
        tuner.clear(domain, lease)
    assert _memtune_soft_limit(domain) == (GUEST_MIB - 32) * 1024
    tuner.clear(domain, 'lease-b')
    assert _memtune_soft_limit(domain) is None


def test_an_instance_with_no_domain_here_is_left_alone(libvirt_conn):
    tuner = memory_tuning.GuestMemoryTuner(
        libvirt_guest.GuestMemoryAttacher(uri='qemu:///system'),
        min_resident_percent=25)
    assert tuner.apply(str(uuid.uuid4()), 'lease-a', 64) is None
