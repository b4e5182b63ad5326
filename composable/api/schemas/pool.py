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

CREATE = {'1.0': _CREATE}
UPDATE = {'1.0': _UPDATE}
