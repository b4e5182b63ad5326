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

"""Small pieces shared by the controllers: bodies, query strings, links,
pagination and responses."""

from urllib import parse

from oslo_serialization import jsonutils
from oslo_utils import strutils
from oslo_utils import timeutils
from oslo_utils import uuidutils
import os_traits
import webob
from webob import exc as webob_exc

from composable.api import microversion
from composable.api import validation
from composable.common import exception
from composable.common import utils
from composable import conf

CONF = conf.CONF

# Where composable.api.hooks.JsonBodyHook leaves the parsed body.
BODY_KEY = 'composable.body'
PAGINATION_PARAMS = ('limit', 'marker', 'sort_key', 'sort_dir')
COMMON_SORT_KEYS = ('created_at', 'updated_at', 'uuid', 'name')


def context(request):
    return request.environ['composable.context']


def version(request):
    return request.environ[microversion.ENVIRON_KEY]


def conductor(request):
    return request.environ['composable.conductor']()


def base_url(request):
    if CONF.api.public_endpoint:
        return CONF.api.public_endpoint.rstrip('/')
    return request.application_url.rstrip('/')


def self_link(request, plural, uuid):
    return [{'rel': 'self',
             'href': '%s/v1/%s/%s' % (base_url(request), plural, uuid)}]


def json_response(body, status=200, headers=None):
    response = webob.Response(status=status,
                              content_type='application/json',
                              charset='UTF-8')
    response.text = jsonutils.dumps(body)
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


def no_content():
    response = webob.Response(status=204)
    response.content_type = None
    return response


# Deeper than this, a body is refused before it is validated: no schema
# of the API nests more than a few levels.
MAX_BODY_DEPTH = 32


def _refuse_constant(name):
    raise exception.Invalid(
        'Malformed JSON in request body: %s is not a JSON number' % name)


def _check_text(value, where=()):
    """Refuse what JSON can carry but the API cannot keep: strings holding
    a lone UTF-16 surrogate ("\\ud800" is valid JSON, not valid Unicode,
    and no database could store it) and absurdly deep nesting."""
    if len(where) > MAX_BODY_DEPTH:
        raise exception.Invalid(
            'Invalid input: the body nests deeper than %d levels'
            % MAX_BODY_DEPTH)
    if isinstance(value, str):
        try:
            value.encode('utf-8')
        except UnicodeEncodeError:
            field = '/'.join(validation.shorten(str(p)) for p in where)
            raise exception.Invalid(
                "Invalid input%s: the text holds a lone UTF-16 surrogate "
                "(an escape like \\ud800 without its pair), which is not "
                "Unicode" % (" for field '%s'" % field if field else ''))
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, where)
            _check_text(item, where + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_text(item, where + (index,))


def load_json(raw):
    """The JSON document in the bytes ``raw`` (UTF-8, as RFC 8259 asks),
    or Invalid with what is wrong with it."""
    try:
        text = raw.decode('utf-8')
    except UnicodeDecodeError as exc:
        raise exception.Invalid(
            'The request body is not valid UTF-8 (byte 0x%02x at offset '
            '%d); send JSON encoded as UTF-8.' % (raw[exc.start],
                                                  exc.start))
    try:
        body = jsonutils.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise exception.Invalid(
            'Invalid input: the body nests deeper than %d levels'
            % MAX_BODY_DEPTH)
    except ValueError as exc:
        raise exception.Invalid('Malformed JSON in request body: %s' %
                                validation.shorten(str(exc)))
    _check_text(body)
    return body


def _charset(request):
    """The charset parameter of the request's Content-Type, or None."""
    for param in request.headers.get('Content-Type', '').split(';')[1:]:
        key, _, value = param.partition('=')
        if key.strip().lower() == 'charset':
            return value.strip().strip('"')
    return None


def check_charset(request):
    """415 for a body in another charset than UTF-8 (RFC 8259's)."""
    charset = _charset(request)
    if charset is not None and charset.lower().replace('-', '') != 'utf8':
        raise webob_exc.HTTPUnsupportedMediaType(
            'Charset %s is not supported; send JSON encoded as UTF-8.' %
            validation.shorten(charset))


def read_body(request, schemas_by_version, allow_empty=False):
    """The JSON object in the body, validated for the request's version."""
    raw = request.body
    if not raw.strip():
        if allow_empty:
            body = {}
            validation.validate_versioned(schemas_by_version,
                                          version(request), body)
            return body
        raise exception.Invalid('The request needs a JSON body.')
    if request.content_type != 'application/json':
        raise webob_exc.HTTPUnsupportedMediaType(
            'Content-Type %s is not supported; send application/json.' %
            validation.shorten(request.content_type or '(none)'))
    if BODY_KEY in request.environ:
        body = request.environ[BODY_KEY]
    else:
        check_charset(request)
        body = load_json(raw)
    validation.validate_versioned(schemas_by_version, version(request),
                                  body)
    return body


def reject_empty_body(request):
    """For methods that take no body: refuse one rather than ignore it."""
    if request.body.strip():
        raise exception.Invalid('This request takes no body.')


def parse_query(request, filters=(), paginate=True):
    """The query parameters as a dict; unknown ones are refused (400) so
    that a typo in a filter never silently lists everything."""
    allowed = set(filters)
    if paginate:
        allowed.update(PAGINATION_PARAMS)
    unknown = sorted(set(request.GET.keys()) - allowed)
    if unknown:
        raise exception.Invalid(
            'Unknown query parameter(s): %s. Accepted: %s.' % (
                ', '.join(unknown), ', '.join(sorted(allowed)) or 'none'))
    query = {}
    for key in request.GET.keys():
        values = request.GET.getall(key)
        if len(values) > 1:
            raise exception.Invalid(
                'Query parameter %s was given more than once.' % key)
        query[key] = values[0]
    return query


def pagination(query, sort_keys=COMMON_SORT_KEYS):
    """limit, marker, sort_key, sort_dir from a parsed query."""
    limit = query.get('limit')
    if limit is None:
        limit = CONF.api.default_limit
    else:
        try:
            limit = int(limit)
        except ValueError:
            limit = 0
        if limit < 1:
            raise exception.Invalid(
                "Invalid input for query parameter 'limit': %s is not a "
                "positive integer" % query['limit'])
    limit = min(limit, CONF.api.max_limit)
    marker = query.get('marker')
    if marker is not None and not uuidutils.is_uuid_like(marker):
        raise exception.Invalid(
            "Invalid input for query parameter 'marker': %s is not a UUID"
            % marker)
    sort_key = query.get('sort_key', 'created_at')
    if sort_key not in sort_keys:
        raise exception.Invalid(
            "Invalid input for query parameter 'sort_key': %s; accepted: %s"
            % (sort_key, ', '.join(sort_keys)))
    sort_dir = query.get('sort_dir', 'asc')
    if sort_dir not in ('asc', 'desc'):
        raise exception.Invalid(
            "Invalid input for query parameter 'sort_dir': %s; accepted: "
            "asc, desc" % sort_dir)
    return {'limit': limit, 'marker': marker, 'sort_key': sort_key,
            'sort_dir': sort_dir}


def collection(request, plural, items, page, query):
    """A list body; a next link when the page is full, carrying the same
    filters and sort so the client just follows it."""
    body = {plural: items}
    if items and len(items) >= page['limit']:
        params = dict(query)
        params['limit'] = str(page['limit'])
        params['marker'] = items[-1]['uuid']
        href = '%s/v1/%s?%s' % (base_url(request), plural,
                                parse.urlencode(sorted(params.items())))
        body['links'] = [{'rel': 'next', 'href': href}]
    return body


def bool_param(query, name):
    value = query.get(name)
    if value is None:
        return False
    try:
        return strutils.bool_from_string(value, strict=True)
    except ValueError:
        raise exception.Invalid(
            "Invalid input for query parameter '%s': %s is not a boolean"
            % (name, value))


def parse_time(field, value):
    """A naive UTC datetime from an ISO 8601 string (None stays None)."""
    if value is None:
        return None
    try:
        parsed = timeutils.parse_isotime(value)
    except ValueError:
        raise exception.Invalid(
            "Invalid input for field '%s': %s is not an ISO 8601 time, "
            "like 2026-11-22T10:00:00Z" % (field, value))
    return utils.to_naive_utc(parsed)


def isotime(value):
    return utils.isotime(value)


def check_name(resource, name):
    """Names are identifiers in URLs next to UUIDs: a name that looks like
    a UUID would be ambiguous."""
    if name is not None and uuidutils.is_uuid_like(name):
        raise exception.Invalid(
            "Invalid input for field 'name': a %s name may not be a UUID"
            % resource)


def referenced(lookup, context, ident, field, label):
    """Resolve a reference given in a body or a filter: an unknown object
    there is the client's mistake (400), not a missing URL (404)."""
    try:
        return lookup(context, ident)
    except exception.NotFound:
        raise exception.Invalid(
            "Invalid input for field '%s': %s '%s' not found" % (
                field, label, ident))


_STANDARD_TRAITS = None


def validate_traits(field, traits):
    """Traits are os-traits standard names or CUSTOM_* names (Placement
    refuses anything else, so refuse it here first)."""
    global _STANDARD_TRAITS
    if not traits:
        return
    if _STANDARD_TRAITS is None:
        _STANDARD_TRAITS = frozenset(os_traits.get_traits())
    for trait in traits:
        if os_traits.is_custom(trait):
            if len(trait) <= len(os_traits.CUSTOM_NAMESPACE):
                raise exception.Invalid(
                    "Invalid input for field '%s': %s is not a trait name"
                    % (field, trait))
            continue
        if trait not in _STANDARD_TRAITS:
            raise exception.Invalid(
                "Invalid input for field '%s': %s is neither a standard "
                "trait (os-traits) nor a custom one (CUSTOM_...)" % (
                    field, trait))
