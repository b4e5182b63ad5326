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

# A name is looked up in URLs and shown in tables: no "/" (a path
# separator), no control characters (U+0000 to U+001F, U+007F to U+009F)
# or line separators, and no whitespace at either end (so not blank). The
# pattern means the same in Python and ECMA 262 (OpenAPI's dialect); its
# end is a look-ahead rather than "$", which in Python also matches before
# a final newline.
_NAME_EDGE = r'[^\s/\x00-\x1f\x7f-\x9f]'
NAME_PATTERN = (r'^%s(?:[^/\x00-\x1f\x7f-\x9f\u2028\u2029]*%s)?(?![\s\S])'
                % (_NAME_EDGE, _NAME_EDGE))
NAME_RULE = ('a name may not be blank, start or end with whitespace, or '
             'hold "/" or control characters such as a newline')

name = {'type': 'string', 'minLength': 1, 'maxLength': 255,
        'pattern': NAME_PATTERN}
nullable_name = {'type': ['string', 'null'], 'minLength': 1,
                 'maxLength': 255, 'pattern': NAME_PATTERN}
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
