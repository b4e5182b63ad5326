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

"""The root controller: version discovery and the route table.

Routing is an explicit table rather than Pecan's object dispatch: every
path and method the API serves is listed in ROUTES (and documented in
openapi.yaml, which a unit test keeps in step with this table). Unknown
paths answer 404, known paths with another method 405 with an Allow
header.
"""

import pecan
from webob import exc as webob_exc

from composable.api.controllers import v1
from composable.api import microversion
from composable.api import utils

JSON = 'application/json'


def _version(request):
    return {
        'id': 'v1',
        'status': 'CURRENT',
        'min_version': microversion.MIN_VERSION_STRING,
        'max_version': microversion.MAX_VERSION_STRING,
        'links': [{'rel': 'self',
                   'href': '%s/v1/' % utils.base_url(request)}],
    }


def versions(request):
    return utils.json_response({'versions': [_version(request)]})


def version_v1(request):
    return utils.json_response({'version': _version(request)})


ROUTES = (
    ('/', {'GET': versions}),
    ('/v1/', {'GET': version_v1}),
) + v1.ROUTES


def _split(path):
    return [segment for segment in path.split('/') if segment]


_COMPILED = [(_split(template), methods) for template, methods in ROUTES]


def match(path):
    """The methods of the route matching ``path`` and the values of its
    placeholders, or (None, None)."""
    segments = _split(path)
    for template, methods in _COMPILED:
        if len(template) != len(segments):
            continue
        args = []
        for expected, actual in zip(template, segments):
            if expected.startswith('{'):
                args.append(actual)
            elif expected != actual:
                break
        else:
            return methods, args
    return None, None


class RootController(object):

    @pecan.expose()
    def _route(self, args, request=None):
        request = request or pecan.request
        methods, path_args = match(request.path_info)
        if methods is None:
            raise webob_exc.HTTPNotFound(
                'No resource at %s.' % request.path_info)
        handler = methods.get(request.method)
        if handler is None:
            error = webob_exc.HTTPMethodNotAllowed(
                'Method %s is not allowed on %s.' % (
                    request.method, request.path_info))
            error.allow = sorted(methods)
            raise error
        if request.accept and not request.accept.acceptable_offers(
                [JSON]):
            raise webob_exc.HTTPNotAcceptable(
                'Only %s responses are available.' % JSON)
        request.environ['composable.handler'] = handler
        return self._dispatch, path_args

    @pecan.expose(content_type=JSON)
    def _dispatch(self, *args):
        request = pecan.request
        return request.environ['composable.handler'](request, *args)
