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
from composable.api import schemas
from composable.common import exception

# An error message shows this much of a submitted value, never all of it:
# a 1 MB name must not come back as a 1 MB error.
SHOWN_CHARS = 64


def _is_integer(checker, instance):
    # JSON Schema draft 6 and later call 1.0 an integer; the API's
    # document is OpenAPI 3.0, whose schema dialect (draft Wright-00)
    # does not ("a JSON number without a fraction or exponent part"), and
    # OpenStack APIs refuse it too. Refusing it keeps every integer field
    # an int from the body to the database.
    return isinstance(instance, int) and not isinstance(instance, bool)


Validator = jsonschema.validators.extend(
    jsonschema.Draft7Validator,
    type_checker=jsonschema.Draft7Validator.TYPE_CHECKER.redefine(
        'integer', _is_integer))


def shorten(value, limit=SHOWN_CHARS):
    """``value`` as shown in a message: its repr for non-strings, cut to
    ``limit`` characters with the number of those left out."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return text
    return '%s... (%d more characters)' % (text[:limit], len(text) - limit)


def _shown(instance):
    return shorten(repr(instance))


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
            '/'.join([where, shorten(unknown[0])]).strip('/') if unknown
            else where,
            'known fields are %s' % ', '.join(known) if known
            else 'no fields are accepted'))
    field = shorten(_field(error))
    message = error.message
    shown = _shown(error.instance)
    if error.validator == 'pattern' and error.schema.get('pattern') == \
            schemas.NAME_PATTERN:
        message = '%s is not a usable name: %s' % (shown, schemas.NAME_RULE)
    elif error.validator == 'type' and isinstance(error.instance, float) \
            and 'integer' in error.validator_value:
        message = ('%s is not an integer; give a whole number without a '
                   'decimal point or exponent' % shown)
    else:
        message = message.replace(repr(error.instance), shown)
    if len(message) > 4 * SHOWN_CHARS:
        message = shorten(message, 4 * SHOWN_CHARS)
    if not field:
        return 'Invalid input: %s' % message
    return "Invalid input for field '%s': %s" % (field, message)


def validate(schema, body):
    """Raise exception.Invalid (400) with a readable message when ``body``
    does not match ``schema``."""
    validator = Validator(schema)
    error = js_exc.best_match(validator.iter_errors(body))
    if error is not None:
        raise exception.Invalid(_message(error))


def validate_versioned(choices, version, body):
    """Validate against the schema of ``choices`` for ``version``."""
    validate(microversion.select(version, choices), body)
