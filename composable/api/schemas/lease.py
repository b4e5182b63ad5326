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
from composable.api.schemas import device
from composable.common import states

# virtio-mem came with 1.6; before it, only host and guest.
ATTACH_MODES_1_0 = [states.ATTACH_HOST, states.ATTACH_GUEST]
ATTACH_MODES = list(states.ATTACH_MODES)

_CREATE = schemas.obj({
    'name': schemas.nullable_name,
    'description': schemas.description,
    'memory_mb': schemas.size_mb,
    'device_count': {'type': 'integer', 'minimum': 1,
                     'maximum': schemas.MAX_DEVICES},
    'device_kind': device.kind,
    'device_model': schemas.short_string,
    'device_traits': schemas.traits,
    'device_uuids': {'type': 'array', 'items': schemas.uuid,
                     'uniqueItems': True, 'minItems': 1,
                     'maxItems': schemas.MAX_DEVICES},
    'pools': {'type': 'array', 'items': schemas.ident, 'uniqueItems': True,
              'minItems': 1, 'maxItems': schemas.MAX_LIST},
    'attach_mode': {'type': 'string', 'enum': ATTACH_MODES_1_0},
    'start_at': schemas.nullable_timestamp,
    'end_at': schemas.nullable_timestamp,
})

# Windows are in seconds: a day is the longest observation that still
# predicts (a window as long as the job is static provisioning); ten
# seconds is the shortest a compute agent reports at.
MIN_WINDOW = 10
MAX_WINDOW = 86400
MAX_HEADROOM = 10.0

elastic = schemas.obj({
    'min_mb': schemas.size_mb,
    'max_mb': schemas.size_mb,
    'observation_window': {'type': 'integer', 'minimum': MIN_WINDOW,
                           'maximum': MAX_WINDOW},
    'prediction_window': {'type': 'integer', 'minimum': MIN_WINDOW,
                          'maximum': MAX_WINDOW},
    'headroom': {'type': 'number', 'minimum': 0,
                 'maximum': MAX_HEADROOM},
}, required=('min_mb', 'max_mb', 'observation_window',
             'prediction_window'))

_CREATE_1_2 = dict(_CREATE, properties=dict(
    _CREATE['properties'], elastic=elastic))

USAGE_QUERY = schemas.obj({
    'since': {'type': 'string', 'minLength': 1, 'maxLength': 64},
    'limit': {'type': 'string', 'pattern': '^[0-9]{1,9}$'},
    'marker': {'type': 'string', 'pattern': '^[0-9]{1,18}$'},
})

_UPDATE = schemas.obj({
    'name': schemas.nullable_name,
    'description': schemas.description,
    'end_at': schemas.nullable_timestamp,
})

_BIND = schemas.obj({
    'host': schemas.ident,
    'server': schemas.uuid,
    'attach_mode': {'type': 'string', 'enum': ATTACH_MODES_1_0},
})

_UNBIND = schemas.obj({})


def _with_modes(schema, modes):
    properties = dict(schema['properties'])
    properties['attach_mode'] = {'type': 'string', 'enum': list(modes)}
    return dict(schema, properties=properties)


_CREATE_1_6 = _with_modes(_CREATE_1_2, ATTACH_MODES)
_BIND_1_6 = _with_modes(_BIND, ATTACH_MODES)

CREATE = {'1.0': _CREATE, '1.2': _CREATE_1_2, '1.6': _CREATE_1_6}
UPDATE = {'1.0': _UPDATE}
BIND = {'1.0': _BIND, '1.6': _BIND_1_6}
UNBIND = {'1.0': _UNBIND}
