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

"""JSON schemas (Draft 7) of request bodies, one module per resource.

Each module maps a microversion to a schema (``CREATE = {'1.0': {...}}``)
so that a later version adds an entry instead of editing the old one;
:func:`composable.api.microversion.select` picks the entry for a request.

The limits below reject absurd values early with a clear message; real
capacity checks happen later against the inventory.
"""

MAX_MB = 2 ** 40  # One exbibyte in MiB: far beyond any rack.
MAX_DEVICES = 4096
MAX_LIST = 64

name = {'type': 'string', 'minLength': 1, 'maxLength': 255}
nullable_name = {'type': ['string', 'null'], 'minLength': 1,
                 'maxLength': 255}
description = {'type': ['string', 'null'], 'maxLength': 255}
ident = {'type': 'string', 'minLength': 1, 'maxLength': 255}
uuid = {'type': 'string',
        'pattern': '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-'
                   '[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$'}
nullable_uuid = dict(uuid, type=['string', 'null'])
trait = {'type': 'string', 'pattern': '^[A-Z0-9_]+$', 'maxLength': 255}
traits = {'type': 'array', 'items': trait, 'uniqueItems': True,
          'maxItems': MAX_LIST}
free_object = {'type': 'object', 'maxProperties': MAX_LIST}
size_mb = {'type': 'integer', 'minimum': 1, 'maximum': MAX_MB}
reserved_mb = {'type': 'integer', 'minimum': 0, 'maximum': MAX_MB}
short_string = {'type': ['string', 'null'], 'maxLength': 255}
nullable_timestamp = {'type': ['string', 'null'], 'minLength': 1,
                      'maxLength': 64}


def obj(properties, required=()):
    """An object schema that refuses fields it does not name."""
    schema = {'type': 'object', 'properties': properties,
              'additionalProperties': False}
    if required:
        schema['required'] = list(required)
    return schema
