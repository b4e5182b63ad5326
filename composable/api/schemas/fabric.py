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

_CREATE = schemas.obj({
    'name': schemas.name,
    'driver': {'type': 'string', 'minLength': 1, 'maxLength': 64},
    'driver_info': schemas.free_object,
    'aggregate_uuid': schemas.nullable_uuid,
    'description': schemas.description,
}, required=['name', 'driver'])

_UPDATE = schemas.obj({
    'name': schemas.name,
    'driver_info': schemas.free_object,
    'aggregate_uuid': schemas.nullable_uuid,
    'description': schemas.description,
})

CREATE = {'1.0': _CREATE}
UPDATE = {'1.0': _UPDATE}
