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

"""How the memory of a memory pool reaches a host (``pools.medium``).

``network``
    RAM of memory nodes, one file on tmpfs per extent, exported over
    iSCSI (iSER or TCP) and used as swap on the host or as a disk in the
    guest. Every memory pool made before media existed is one.
``cxl``
    CXL Type-3 memory devices (a multi-headed device or a device behind a
    CXL switch) whose capacity is handed out in whole chunks (the pool's
    ``step_size``, a multiple of the 256 MiB an HDM decoder maps): the
    host makes a RAM region of the lease's chunks, puts it in ``kmem``
    and onlines it movable, as a NUMA node without CPUs. Host mode only:
    the memory is the host's, never a guest's disk.
"""

NETWORK = 'network'
CXL = 'cxl'
MEDIA = (NETWORK, CXL)

# The granule of a CXL HDM decoder: a region's size, and its place in the
# device's capacity, are multiples of it (CXL 2.0, 8.2.5.12).
CXL_GRANULE_MB = 256

# The memory node "exporter" of a CXL pool: the node is a CXL memory
# device, which no memory-node agent serves.
CXL_EXPORTER = 'cxl'


def medium(pool):
    """The medium of a memory pool (network for rows made before media
    existed); None for a device pool."""
    if pool is None or getattr(pool, 'kind', None) != 'memory':
        return None
    return getattr(pool, 'medium', None) or NETWORK


def is_cxl(pool):
    return medium(pool) == CXL
