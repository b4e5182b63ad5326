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

"""Pools of SR-IOV virtual functions: the words the API, the conductor
and the agent share.

Such a pool is a ``pci`` pool whose devices are the virtual functions
(VFs) of one physical function (PF) of one host. The PF stays with the
host and is never a device of the pool; each VF is one device row, handed
to one lease at a time. Its fabric-native address is
``<PF address>/virtfn<N>``, N being the VF's number under the PF, which is
how the agent finds it (``/sys/bus/pci/devices/<PF>/virtfn<N>``).

Who creates the VFs (``vf_mode``):

* ``on_demand`` -- the conductor asks the host's agent to give the PF the
  pool's VF count when a lease of the pool is bound and the PF has none,
  and to take them all away (numvfs 0) when the last lease of the pool
  lets go of its VF. The kernel changes a VF count only through 0, which
  destroys every VF: so all VFs of the pool are made at once, never one
  per lease;
* ``precreated`` -- the host's ``[compute_node]sriov_numvfs`` makes them
  when the agent starts; the conductor never changes the count, and a
  bind finding too few VFs fails saying so.
"""

import re

ON_DEMAND = 'on_demand'
PRECREATED = 'precreated'
VF_MODES = (ON_DEMAND, PRECREATED)

# The kernel's limit on sriov_numvfs (a 16-bit VF count; real PFs offer at
# most a few hundred).
MAX_VFS = 256

_ADDRESS = re.compile(r'^(?P<pf>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])'
                      r'/virtfn(?P<index>[0-9]+)$')


def is_sriov_pool(pool):
    return getattr(pool, 'sriov_host_id', None) is not None


def vf_device_address(pf_address, index):
    """The fabric-native address of VF ``index`` of a PF."""
    return '%s/virtfn%d' % (pf_address, index)


def vf_index(device_address):
    """The VF number of a device of an SR-IOV pool; ValueError if the
    address is not one of ours."""
    match = _ADDRESS.match(device_address or '')
    if not match:
        raise ValueError('%r is not the address of a virtual function '
                         '(<PF address>/virtfn<N>)' % (device_address,))
    return int(match.group('index'))


def device_sriov(pool, device_address):
    """What the host's agent needs to find and, when on demand, create the
    VF of a device: the ``sriov`` entry of the agent's device view."""
    return {'pf_address': pool.sriov_pf_address,
            'vf_count': pool.sriov_vf_count,
            'vf_mode': pool.sriov_vf_mode,
            'vf_index': vf_index(device_address)}


def view(pool):
    """A pool's SR-IOV settings as the API shows them; None for a pool of
    another kind."""
    if not is_sriov_pool(pool):
        return None
    return {'host_uuid': pool.sriov_host.uuid if pool.sriov_host else None,
            'host': pool.sriov_host.name if pool.sriov_host else None,
            'pf_address': pool.sriov_pf_address,
            'vf_count': pool.sriov_vf_count,
            'vf_mode': pool.sriov_vf_mode}
