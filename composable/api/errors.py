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

"""Turn exceptions into the OpenStack API-SIG error body.

Every error the API returns has the same shape::

    {"errors": [{"status": 404, "code": "composable.lease.not_found",
                 "title": "Not Found", "detail": "Lease x could not be found.",
                 "request_id": "req-..."}]}

Unexpected exceptions become a 500 with a generic detail: their text may
hold anything (SQL, driver settings), so it goes to the log only.
"""

from oslo_log import log as logging
import oslo_messaging as messaging
from oslo_serialization import jsonutils
import webob
from webob import exc as webob_exc
from webob import util as webob_util

from composable.api import microversion
from composable.common import exception

LOG = logging.getLogger(__name__)

GENERIC_500 = ('The server failed to process the request; the error was '
               'logged. Quote the request_id when reporting it.')

# Codes for errors raised by the HTTP plumbing rather than by composable.
_HTTP_CODES = {
    400: 'composable.invalid',
    401: 'composable.unauthorized',
    403: 'composable.forbidden',
    404: 'composable.not_found',
    405: 'composable.method_not_allowed',
    406: 'composable.not_acceptable',
    409: 'composable.conflict',
    413: 'composable.too_large',
    415: 'composable.unsupported_media_type',
}


def request_id(request):
    if request is None:
        return None
    return request.environ.get('openstack.request_id')


def error_response(request, status, code, detail, headers=None):
    title = webob_util.status_reasons.get(status, 'Error')
    body = {'errors': [{'status': status,
                        'code': code,
                        'title': title,
                        'detail': detail,
                        'request_id': request_id(request)}]}
    response = webob.Response(status=status,
                              content_type='application/json',
                              charset='UTF-8')
    response.text = jsonutils.dumps(body)
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


def _http_exception_detail(exc):
    detail = exc.detail
    if not detail:
        if exc.code == 404:
            detail = 'The resource could not be found.'
        elif exc.code == 405:
            detail = 'Method %s is not allowed on this resource.' % (
                getattr(exc, 'method', None) or 'used')
        else:
            detail = exc.explanation
    return detail


def to_response(request, exc):
    """The error response for ``exc``."""
    if isinstance(exc, exception.ComposableException):
        status = int(exc.code)
        # Remote exceptions carry the remote traceback in str(); the
        # message attribute holds only what the user should read.
        detail = exc.message
        if status >= 500 and not exc.safe:
            LOG.error('Request %s failed: %s', request_id(request),
                      detail)
            detail = GENERIC_500
        elif status >= 500:
            LOG.warning('Request %s failed: %s', request_id(request),
                        detail)
        return error_response(request, status, exc.error_code, detail)
    if isinstance(exc, microversion.MicroversionError):
        code = ('composable.microversion.unsupported' if exc.code == 406
                else 'composable.microversion.invalid')
        return error_response(request, exc.code, code, exc.message)
    if isinstance(exc, webob_exc.HTTPException):
        status = exc.code
        headers = {}
        if status == 405 and exc.allow:
            headers['Allow'] = ', '.join(exc.allow)
        code = _HTTP_CODES.get(status, 'composable.error')
        if status >= 500:
            LOG.error('Request %s failed: %s', request_id(request),
                      exc.detail)
            return error_response(request, status, code, GENERIC_500)
        return error_response(request, status, code,
                              _http_exception_detail(exc), headers)
    if isinstance(exc, messaging.MessagingTimeout):
        LOG.warning('Request %s: composable-conductor did not answer in '
                    'time', request_id(request))
        return error_response(
            request, 503, 'composable.conductor.timeout',
            'composable-conductor did not answer in time; the operation '
            'may still complete. Check the lease, then try again.')
    _hide_sql_parameters(exc)
    LOG.exception('Unexpected error in request %s', request_id(request))
    return error_response(request, 500, 'composable.error', GENERIC_500)


def _hide_sql_parameters(exc):
    """Keep bound SQL parameters (driver_info, CHAP secrets) out of the
    logged traceback: SQLAlchemy prints them in str() unless told not to."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if hasattr(exc, 'hide_parameters'):
            exc.hide_parameters = True
        exc = (getattr(exc, 'inner_exception', None) or exc.__cause__ or
               exc.__context__)
