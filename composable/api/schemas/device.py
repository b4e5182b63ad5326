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
from composable.common import states

# States an operator may set; reserved and attached follow the leases.
SETTABLE_STATES = list(states.DEVICE_SETTABLE_STATES)
STATES = list(states.DEVICE_STATES)

_pci_id = {'type': ['string', 'null'], 'pattern': '^[0-9a-fA-F]{4}$'}
kind = {'type': 'string', 'pattern': '^[a-z0-9_]+$', 'minLength': 1,
        'maxLength': 16}

_CREATE = schemas.obj({
    'pool': schemas.ident,
    'address': {'type': 'string', 'minLength': 1, 'maxLength': 255},
    'kind': kind,
    'name': schemas.nullable_name,
    'vendor_id': _pci_id,
    'product_id': _pci_id,
    'model': schemas.short_string,
    'traits': schemas.traits,
}, required=['pool', 'address'])

_UPDATE = schemas.obj({
    'name': schemas.nullable_name,
    'model': schemas.short_string,
    'traits': schemas.traits,
    'state': {'type': 'string', 'enum': SETTABLE_STATES},
})

CREATE = {'1.0': _CREATE}
UPDATE = {'1.0': _UPDATE}
