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

# RFC 3720 caps an iSCSI name at 223 bytes.
_iqn = {'type': ['string', 'null'], 'minLength': 1, 'maxLength': 223}

_CREATE = schemas.obj({
    'name': schemas.name,
    'fabric': schemas.ident,
    'initiator_iqn': _iqn,
    'partition_id': schemas.short_string,
    'properties': schemas.free_object,
}, required=['name', 'fabric'])

_UPDATE = schemas.obj({
    'initiator_iqn': _iqn,
    'partition_id': schemas.short_string,
    'properties': schemas.free_object,
})

CREATE = {'1.0': _CREATE}
UPDATE = {'1.0': _UPDATE}
