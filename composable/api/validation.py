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

"""Validate request bodies against the JSON schemas of composable.api.schemas.

Messages name the field, so a client can fix its request without reading
the schema: "Invalid input for field 'memory_mb': -1 is less than the
minimum of 1".
"""

import jsonschema
from jsonschema import exceptions as js_exc

from composable.api import microversion
from composable.common import exception


def _field(error):
    path = [str(p) for p in error.absolute_path]
    return '/'.join(path)


def _message(error):
    if error.validator == 'required':
        # The missing property is not on the path: it is in the message.
        missing = error.message.split("'")[1] if "'" in error.message \
            else ''
        return "Invalid input for field '%s': the field is required" % (
            '/'.join([_field(error), missing]).strip('/'))
    if error.validator == 'additionalProperties':
        known = sorted(error.schema.get('properties', {}))
        unknown = sorted(set(error.instance) - set(known))
        where = _field(error)
        return ("Invalid input for field '%s': unknown field; %s" % (
            '/'.join([where, unknown[0]]).strip('/') if unknown else where,
            'known fields are %s' % ', '.join(known) if known
            else 'no fields are accepted'))
    field = _field(error)
    if not field:
        return 'Invalid input: %s' % error.message
    return "Invalid input for field '%s': %s" % (field, error.message)


def validate(schema, body):
    """Raise exception.Invalid (400) with a readable message when ``body``
    does not match ``schema``."""
    validator = jsonschema.Draft7Validator(schema)
    error = js_exc.best_match(validator.iter_errors(body))
    if error is not None:
        raise exception.Invalid(_message(error))


def validate_versioned(choices, version, body):
    """Validate against the schema of ``choices`` for ``version``."""
    validate(microversion.select(version, choices), body)
