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

"""Domain XML carrying Nova's instance metadata, as Nova 34's libvirt
driver writes it (nova/virt/libvirt/config.py,
LibvirtConfigGuestMetaNovaInstance and the classes it contains): the
``<nova:instance>`` element in ``<metadata>`` with package, name,
creationTime, flavor (with its extraSpecs), image, owner, root and ports.

tests/unit/hooks/test_libvirt_nova_metadata.py checks this text against what
Nova's own classes produce, so the hook is tested on what Nova writes.
"""

from xml.sax import saxutils

NOVA_NS = 'http://openstack.org/xmlns/libvirt/nova/1.1'
PROJECT_ID = '6f70656e737461636b20697320636f6f'
USER_ID = '9ed8a1e0b3a44b5f8f9c3b6b9d3c2a10'
IMAGE_ID = '0e7c6a1e-3c0c-4b5e-a1f3-3a8f3e9bd0c2'
PORT_ID = '5d1e6f0a-8d5f-4a52-9b8d-6c1fb36a4a2e'


def metadata(name='server-1', flavor='m1.composable', memory_mb=1024,
             vcpus=1, extra_specs=None, project_id=PROJECT_ID,
             user_id=USER_ID, with_extra_specs=True):
    """The ``<nova:instance>`` element, as text."""
    esc = saxutils.escape
    specs = ''
    for key, value in sorted((extra_specs or {}).items()):
        specs += ('\n          <nova:extraSpec name=%s>%s</nova:extraSpec>'
                  % (saxutils.quoteattr(key), esc(str(value))))
    if with_extra_specs:
        specs = ('\n        <nova:extraSpecs>%s\n        </nova:extraSpecs>'
                 % specs if specs else '\n        <nova:extraSpecs/>')
    return '''<nova:instance xmlns:nova="%(ns)s">
      <nova:package version="34.0.0"/>
      <nova:name>%(name)s</nova:name>
      <nova:creationTime>2026-11-22 08:00:00</nova:creationTime>
      <nova:flavor name=%(flavor)s id="c0ffee">
        <nova:memory>%(memory)d</nova:memory>
        <nova:disk>1</nova:disk>
        <nova:swap>0</nova:swap>
        <nova:ephemeral>0</nova:ephemeral>
        <nova:vcpus>%(vcpus)d</nova:vcpus>%(specs)s
      </nova:flavor>
      <nova:image uuid="%(image)s">
        <nova:containerFormat>bare</nova:containerFormat>
        <nova:diskFormat>qcow2</nova:diskFormat>
        <nova:minDisk>1</nova:minDisk>
        <nova:minRam>0</nova:minRam>
        <nova:properties>
          <nova:property name="hw_rng_model">virtio</nova:property>
        </nova:properties>
      </nova:image>
      <nova:owner>
        <nova:user uuid="%(user)s">demo</nova:user>
        <nova:project uuid="%(project)s">demo</nova:project>
      </nova:owner>
      <nova:root type="image" uuid="%(image)s"/>
      <nova:ports>
        <nova:port uuid="%(port)s">
          <nova:ip type="fixed" address="10.0.0.12" ipVersion="4"/>
        </nova:port>
      </nova:ports>
    </nova:instance>''' % {
        'ns': NOVA_NS, 'name': esc(name),
        'flavor': saxutils.quoteattr(flavor), 'memory': memory_mb,
        'vcpus': vcpus, 'specs': specs, 'image': IMAGE_ID,
        'user': user_id, 'project': project_id, 'port': PORT_ID}


def add_metadata(domain_xml, **kwargs):
    """``domain_xml`` with Nova's metadata right after its <uuid>."""
    head, sep, tail = domain_xml.partition('</uuid>')
    if not sep:
        raise ValueError('the domain XML has no <uuid>')
    return '%s</uuid>\n  <metadata>\n    %s\n  </metadata>%s' % (
        head, metadata(**kwargs), tail)


def realistic_domain(domain_uuid, name='instance-0000002a', **kwargs):
    """A whole domain as libvirtd hands it to a hook for a Nova instance
    (KVM, virtio disk and NIC, serial console, VNC...): about the size and
    shape of the real thing, for timing the hook."""
    return add_metadata('''<domain type='kvm' id='7'>
  <name>%(name)s</name>
  <uuid>%(uuid)s</uuid>
  <memory unit='KiB'>1048576</memory>
  <currentMemory unit='KiB'>1048576</currentMemory>
  <vcpu placement='static'>1</vcpu>
  <cputune>
    <shares>1024</shares>
  </cputune>
  <resource>
    <partition>/machine</partition>
  </resource>
  <sysinfo type='smbios'>
    <system>
      <entry name='manufacturer'>OpenStack Foundation</entry>
      <entry name='product'>OpenStack Nova</entry>
      <entry name='version'>34.0.0</entry>
      <entry name='serial'>%(uuid)s</entry>
      <entry name='uuid'>%(uuid)s</entry>
      <entry name='family'>Virtual Machine</entry>
    </system>
  </sysinfo>
  <os>
    <type arch='x86_64' machine='pc-q35-7.2'>hvm</type>
    <boot dev='hd'/>
    <smbios mode='sysinfo'/>
  </os>
  <features>
    <acpi/>
    <apic/>
  </features>
  <cpu mode='host-model' check='partial'>
    <topology sockets='1' dies='1' cores='1' threads='1'/>
  </cpu>
  <clock offset='utc'>
    <timer name='pit' tickpolicy='delay'/>
    <timer name='rtc' tickpolicy='catchup'/>
    <timer name='hpet' present='no'/>
  </clock>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2' cache='none'/>
      <source file='/var/lib/nova/instances/%(uuid)s/disk'/>
      <target dev='vda' bus='virtio'/>
      <alias name='virtio-disk0'/>
      <address type='pci' domain='0x0000' bus='0x03' slot='0x00'
               function='0x0'/>
    </disk>
    <controller type='usb' index='0' model='piix3-uhci'>
      <alias name='usb'/>
    </controller>
    <controller type='pci' index='0' model='pcie-root'>
      <alias name='pcie.0'/>
    </controller>
    <interface type='ethernet'>
      <mac address='fa:16:3e:4c:2b:7a'/>
      <target dev='tap5d1e6f0a-8d' managed='no'/>
      <model type='virtio'/>
      <driver name='vhost' rx_queue_size='512'/>
      <mtu size='1442'/>
      <alias name='net0'/>
      <address type='pci' domain='0x0000' bus='0x02' slot='0x00'
               function='0x0'/>
    </interface>
    <serial type='pty'>
      <source path='/dev/pts/3'/>
      <log file='/var/lib/nova/instances/%(uuid)s/console.log'
           append='off'/>
      <target type='isa-serial' port='0'>
        <model name='isa-serial'/>
      </target>
      <alias name='serial0'/>
    </serial>
    <console type='pty' tty='/dev/pts/3'>
      <source path='/dev/pts/3'/>
      <target type='serial' port='0'/>
      <alias name='serial0'/>
    </console>
    <input type='tablet' bus='usb'>
      <alias name='input0'/>
    </input>
    <graphics type='vnc' port='5900' autoport='yes' listen='0.0.0.0'>
      <listen type='address' address='0.0.0.0'/>
    </graphics>
    <video>
      <model type='virtio' heads='1' primary='yes'/>
      <alias name='video0'/>
    </video>
    <memballoon model='virtio'>
      <stats period='10'/>
      <alias name='balloon0'/>
    </memballoon>
    <rng model='virtio'>
      <backend model='random'>/dev/urandom</backend>
      <alias name='rng0'/>
    </rng>
  </devices>
  <seclabel type='dynamic' model='dac' relabel='yes'>
    <label>+64055:+108</label>
    <imagelabel>+64055:+108</imagelabel>
  </seclabel>
</domain>
''' % {'name': name, 'uuid': domain_uuid}, **kwargs)
