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

"""MOCK of libvirt for virtio-mem mode: a running domain with memory
devices (FakeVmemDomain keeps the live XML libvirt would show and plays
the guest's part: ``<current>`` follows ``<requested>`` a step per read,
down to what the guest lets go of) and the agent's connection to it."""

from xml.etree import ElementTree

from composable.agent.compute_node import virtio_mem

INSTANCE = '11111111-2222-3333-4444-555555555555'
MIB = 1024  # KiB


class FakeLibvirtError(Exception):
    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code

    def get_error_code(self):
        return self.code


class FakeVmemDomain(object):
    """MOCK of a running libvirt domain with memory devices."""

    def __init__(self, max_memory=True, numa=True, unpluggable=False,
                 step_kib=128 * MIB):
        self.max_memory = max_memory
        self.numa = numa
        self.unpluggable = unpluggable
        self.step_kib = step_kib
        self.active = True
        # alias -> {'xml': element, 'requested': kib, 'current': kib}
        self.devices = {}
        # What the guest cannot give back (KiB): its floor.
        self.guest_floor_kib = 0
        self.updates = []
        self.unplug_requests = []

    def isActive(self):
        return self.active

    def UUIDString(self):
        return INSTANCE

    def _advance(self):
        for dev in self.devices.values():
            want = max(dev['requested'], self.guest_floor_kib
                       if dev['requested'] < dev['current'] else 0)
            if dev['current'] < want:
                dev['current'] = min(want, dev['current'] + self.step_kib)
            elif dev['current'] > want:
                dev['current'] = max(want, dev['current'] - self.step_kib)

    def XMLDesc(self, flags=0):
        self._advance()
        parts = ["<domain type='qemu'><name>vm-1</name>"]
        if self.max_memory:
            parts.append("<maxMemory slots='2' unit='KiB'>4194304"
                         "</maxMemory>")
        parts.append("<memory unit='KiB'>262144</memory>")
        if self.numa:
            parts.append("<cpu><numa><cell id='0' cpus='0' memory='262144'"
                         " unit='KiB'/></numa></cpu>")
        parts.append('<devices>')
        for dev in self.devices.values():
            element = ElementTree.fromstring(
                ElementTree.tostring(dev['xml'], encoding='unicode'))
            target = element.find('target')
            for name in ('requested', 'current'):
                old = target.find(name)
                if old is not None:
                    target.remove(old)
                ElementTree.SubElement(target, name, unit='KiB').text = \
                    str(dev[name])
            parts.append(ElementTree.tostring(element, encoding='unicode'))
        parts.append('</devices></domain>')
        return ''.join(parts)

    def attachDeviceFlags(self, xml, flags):
        assert flags == virtio_mem.VIR_DOMAIN_AFFECT_LIVE
        element = ElementTree.fromstring(xml)
        assert element.get('model') == 'virtio-mem'
        alias = element.find('alias').get('name')
        requested = int(element.find('target/requested').text)
        self.devices[alias] = {'xml': element, 'requested': requested,
                               'current': 0}

    def updateDeviceFlags(self, xml, flags):
        element = ElementTree.fromstring(xml)
        assert element.find('target/current') is None, \
            'libvirt refuses <current> in an update'
        alias = element.find('alias').get('name')
        requested = int(element.find('target/requested').text)
        self.devices[alias]['requested'] = requested
        self.updates.append(requested // MIB)

    def detachDeviceAlias(self, alias, flags):
        self.unplug_requests.append(alias)
        if not self.unpluggable:
            raise FakeLibvirtError(
                "internal error: unable to execute QEMU command "
                "'device_del': virtio based memory devices cannot be "
                "unplugged.")
        assert self.devices[alias]['current'] == 0, 'forced unplug'
        del self.devices[alias]


class FakeConnection(object):
    """MOCK of the agent's LibvirtConnection."""

    uri = 'qemu:///system'

    def __init__(self, domain):
        self.domain = domain

    def get(self, needed_for=None):
        return self

    def listAllDomains(self, flags=0):
        if self.domain is None or not self.domain.isActive():
            return []
        return [self.domain]

    def lookupByUUIDString(self, uuid):
        if self.domain is None:
            raise FakeLibvirtError('no domain', virtio_mem.VIR_ERR_NO_DOMAIN)
        return self.domain


def attacher(domain, timeout=5):
    return virtio_mem.VirtioMemAttacher(
        connection=FakeConnection(domain), shrink_timeout=timeout,
        poll_interval=0)
