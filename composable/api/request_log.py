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

"""One INFO line per API request, as Nova and Placement log theirs::

    INFO composable.api.request_log [req-… admin demo - - -] 127.0.0.1
    "POST /v1/leases" status: 202 len: 812 microversion: 1.3 time: 0.031

The line carries the request's context (so its request id, user and
project, in oslo.log's usual brackets), the client's address, the method
and path with its query string, the status, the body's length, the
microversion served and the seconds the application took. It is
oslo.middleware's RequestId that also logs: every request has its id,
also the ones refused before a context exists (a bad token, an unknown
path), and the pipeline keeps its shape.
"""

import time

from oslo_context import context as oslo_context
from oslo_log import log as logging
from oslo_middleware import request_id as request_id_mw

LOG = logging.getLogger(__name__)

FORMAT = ('%(remote)s "%(method)s %(path)s" status: %(status)s len: '
          '%(length)s microversion: %(microversion)s time: %(time).6f')


def _path(environ):
    path = (environ.get('SCRIPT_NAME', '') + environ.get('PATH_INFO', '')
            or '/')
    query = environ.get('QUERY_STRING')
    return path + ('?' + query if query else '')


def _context(environ):
    """The request's context when the application made one (its user and
    project), else one that carries only the request id. A context left
    in this thread by an earlier request is never used."""
    rid = environ.get(request_id_mw.ENV_REQUEST_ID)
    current = oslo_context.get_current()
    if current is not None and rid and \
            getattr(current, 'request_id', None) == rid:
        return current
    return oslo_context.RequestContext(request_id=rid, overwrite=False)


class RequestLog(request_id_mw.RequestId):
    """oslo.middleware's RequestId (an id for each request, in the
    environment and the X-OpenStack-Request-ID header), which also logs
    each request once it has been answered."""

    def __call__(self, environ, start_response):
        started = time.monotonic()
        answer = {}

        def _start_response(status, headers, exc_info=None):
            answer['status'] = status.split(' ', 1)[0]
            for name, value in headers:
                lower = name.lower()
                if lower == 'content-length':
                    answer['length'] = value
                elif lower == 'openstack-api-version':
                    answer['microversion'] = value.split(' ')[-1]
            if exc_info is None:
                return start_response(status, headers)
            return start_response(status, headers, exc_info)

        try:
            result = super().__call__(environ, _start_response)
        except Exception:
            answer.setdefault('status', '500')
            self._log(environ, answer, started)
            raise
        self._log(environ, answer, started)
        return result

    @staticmethod
    def _log(environ, answer, started):
        LOG.info(FORMAT, {
            'remote': environ.get('REMOTE_ADDR') or '-',
            'method': environ.get('REQUEST_METHOD'),
            'path': _path(environ),
            'status': answer.get('status', '-'),
            'length': answer.get('length', '-'),
            'microversion': answer.get('microversion', '-'),
            'time': time.monotonic() - started,
        }, extra={'context': _context(environ)})
