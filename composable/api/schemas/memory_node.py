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

TRANSPORTS = ['iser', 'tcp']

_CREATE = schemas.obj({
    'name': schemas.name,
    'pool': schemas.ident,
    'capacity_mb': schemas.size_mb,
    'reserved_mb': schemas.reserved_mb,
    'exporter': {'type': 'string', 'minLength': 1, 'maxLength': 64},
    'portal': schemas.short_string,
    'transport': {'type': 'string', 'enum': TRANSPORTS},
    'enabled': {'type': 'boolean'},
}, required=['name', 'pool', 'capacity_mb'])

_UPDATE = schemas.obj({
    'capacity_mb': schemas.size_mb,
    'reserved_mb': schemas.reserved_mb,
    'portal': schemas.short_string,
    'transport': {'type': 'string', 'enum': TRANSPORTS},
    'enabled': {'type': 'boolean'},
})

CREATE = {'1.0': _CREATE}
UPDATE = {'1.0': _UPDATE}
