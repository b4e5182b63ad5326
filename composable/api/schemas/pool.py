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

from composable.api import schemas
from composable.common import media
from composable.common import sriov

KINDS = ['memory', 'gpu', 'pci']

_CREATE = schemas.obj({
    'name': schemas.name,
    'kind': {'type': 'string', 'enum': KINDS},
    'fabric': schemas.ident,
    'device_class': {'type': 'string', 'pattern': '^[A-Z0-9_]+$',
                     'minLength': 1, 'maxLength': 16},
    'traits': schemas.traits,
    'reserved': {'type': 'integer', 'minimum': 0, 'maximum': schemas.MAX_MB},
    # Memory pools only: extent size in MiB (at least 4, at most 1 TiB).
    'step_size': {'type': 'integer', 'minimum': 4, 'maximum': 2 ** 20},
    'description': schemas.description,
}, required=['name', 'kind', 'fabric'])

_UPDATE = schemas.obj({
    'name': schemas.name,
    'reserved': {'type': 'integer', 'minimum': 0, 'maximum': schemas.MAX_MB},
    'traits': schemas.traits,
    'description': schemas.description,
})

# 1.3: a pci pool of the SR-IOV virtual functions of one physical function
# of one host.
SRIOV = schemas.obj({
    'host': schemas.ident,
    'pf_address': {'type': 'string', 'minLength': 7, 'maxLength': 16,
                   'pattern': '^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:'
                              '[0-9a-fA-F]{2}\\.[0-7]$'},
    'vf_count': {'type': 'integer', 'minimum': 1,
                 'maximum': sriov.MAX_VFS},
    'vf_mode': {'type': 'string', 'enum': list(sriov.VF_MODES)},
    'vendor_id': {'type': 'string', 'pattern': '^(0x)?[0-9a-fA-F]{4}$'},
    'product_id': {'type': 'string', 'pattern': '^(0x)?[0-9a-fA-F]{4}$'},
}, required=['host', 'pf_address', 'vf_count'])

_CREATE_1_3 = dict(_CREATE, properties=dict(_CREATE['properties'],
                                            sriov=SRIOV))

# 1.5: memory pools of CXL memory devices.
_CREATE_1_5 = dict(_CREATE_1_3, properties=dict(
    _CREATE_1_3['properties'],
    medium={'type': 'string', 'enum': list(media.MEDIA)}))

CREATE = {'1.0': _CREATE, '1.3': _CREATE_1_3, '1.5': _CREATE_1_5}
UPDATE = {'1.0': _UPDATE}
