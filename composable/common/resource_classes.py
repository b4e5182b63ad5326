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

"""The Placement names of composable's pools: declared here once.

Every pool is a sharing resource provider with one inventory of its
resource class:

* memory pools: ``CUSTOM_COMPOSABLE_MEMORY_MB`` (network memory: swap
  or a guest disk over iSCSI) and ``CUSTOM_COMPOSABLE_CXL_MEMORY_MB``
  (CXL memory onlined on a host as a NUMA node: another tier, which a
  flavor asking for network memory must never get)
* GPU pools: ``CUSTOM_COMPOSABLE_GPU``
* PCIe device pools: ``CUSTOM_COMPOSABLE_PCI_<CLASS>`` (``<CLASS>`` the
  upper-case device class, e.g. ``CUSTOM_COMPOSABLE_PCI_NVME``)

and the traits ``MISC_SHARES_VIA_AGGREGATE``, ``CUSTOM_COMPOSABLE_POOL``
(the marker of the providers composable manages) and the pool's own
traits (:func:`normalize_trait`).

Flavors ask for these classes (``resources:CUSTOM_COMPOSABLE_*``). The
libvirt hook (composable.hooks.libvirt) keeps its own copy of
:data:`PREFIX`: it imports nothing of the service.
"""

import os_resource_classes as orc
import os_traits

# The start of every resource class composable defines.
PREFIX = orc.CUSTOM_NAMESPACE + 'COMPOSABLE_'

MEMORY_MB = PREFIX + 'MEMORY_MB'
CXL_MEMORY_MB = PREFIX + 'CXL_MEMORY_MB'
GPU = PREFIX + 'GPU'
PCI_PREFIX = PREFIX + 'PCI_'

# Standard trait of a provider that shares its inventory with the
# providers of its aggregates.
SHARING_TRAIT = os_traits.MISC_SHARES_VIA_AGGREGATE
# Marks the providers composable manages.
POOL_TRAIT = os_traits.CUSTOM_NAMESPACE + 'COMPOSABLE_POOL'

_BY_KIND = {'memory': MEMORY_MB, 'gpu': GPU}


def pci(device_class):
    """The resource class of a PCIe device pool of ``device_class``."""
    return PCI_PREFIX + device_class.upper()


def for_pool(kind, device_class=None, medium=None):
    """The resource class of a pool of ``kind`` (memory, gpu or pci);
    ``medium`` of a memory pool (composable.common.media)."""
    if kind == 'memory' and medium == 'cxl':
        return CXL_MEMORY_MB
    return _BY_KIND.get(kind) or pci(device_class)


def for_device_kind(device_kind):
    """(pool kind, resource class) of the pools serving devices of
    ``device_kind`` (None or "gpu" for GPUs, else a PCIe device class)."""
    if device_kind in (None, 'gpu'):
        return 'gpu', GPU
    return 'pci', pci(device_kind)


def is_custom(resource_class):
    """True for a custom resource class (Placement has the standard
    ones already)."""
    return orc.is_custom(resource_class)


def is_custom_trait(trait):
    """True for a custom trait (Placement has the standard ones
    already)."""
    return os_traits.is_custom(trait)


def normalize_trait(name):
    """A trait name Placement accepts: standard names as they are,
    anything else as CUSTOM_<UPPER_SNAKE>."""
    if os_traits.is_custom(name):
        body = name[len(os_traits.CUSTOM_NAMESPACE):]
    elif name.isupper() and all(c.isalnum() or c == '_' for c in name):
        return name
    else:
        body = name
    body = ''.join(c if c.isalnum() else '_' for c in body.upper())
    return os_traits.CUSTOM_NAMESPACE + body
