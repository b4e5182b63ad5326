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

"""One INFO line per API request: method, path, status, time and the
request's id (in its context, as oslo.log prints it)."""

import logging
import re

from oslo_config import cfg
from oslo_log import formatters
from oslo_log import log as oslo_logging

LOGGER = 'composable.api.request_log'
LINE = re.compile(r'^(?P<remote>\S+) "(?P<method>[A-Z]+) (?P<path>\S+)" '
                  r'status: (?P<status>\d{3}) len: (?P<len>\S+) '
                  r'microversion: (?P<mv>\S+) time: (?P<time>\d+\.\d{6})$')


def _lines(caplog):
    return [r for r in caplog.records if r.name == LOGGER]


def test_one_info_line_per_request_with_its_id(client, caplog):
    caplog.set_level(logging.INFO)
    response = client.get('/v1/pools?limit=5', headers={
        'OpenStack-API-Version': 'composable 1.1'})
    assert response.status == 200
    request_id = response.headers['X-OpenStack-Request-ID']
    assert request_id.startswith('req-')
    records = _lines(caplog)
    assert len(records) == 1, [r.getMessage() for r in records]
    record = records[0]
    assert record.levelno == logging.INFO
    match = LINE.match(record.getMessage())
    assert match, record.getMessage()
    assert match['method'] == 'GET'
    assert match['path'] == '/v1/pools?limit=5'
    assert match['status'] == '200'
    assert match['mv'] == '1.1'
    assert int(match['len']) == len(response.raw.body)
    assert 0 <= float(match['time']) < 60
    assert record.context.request_id == request_id
    # As oslo.log prints it: the id in the context's brackets, with the
    # user and project of the request.
    log_conf = cfg.ConfigOpts()
    oslo_logging.register_options(log_conf)
    log_conf([], default_config_files=[], default_config_dirs=[])
    text = formatters.ContextFormatter(config=log_conf).format(record)
    assert ' %s ' % request_id in text, text
    assert 'user-admin admin-project' in text
    assert 'status: 200' in text


def test_a_refused_request_is_logged_with_its_own_id(client, caplog):
    caplog.set_level(logging.INFO)
    first = client.get('/v1/pools')
    caplog.clear()
    response = client.as_('reader').post('/v1/pools', body={'name': 'x'})
    assert response.status == 403
    records = _lines(caplog)
    assert len(records) == 1
    match = LINE.match(records[0].getMessage())
    assert (match['method'], match['path'], match['status']) == (
        'POST', '/v1/pools', '403')
    assert records[0].context.request_id == \
        response.headers['X-OpenStack-Request-ID']
    assert records[0].context.request_id != \
        first.headers['X-OpenStack-Request-ID']


def test_unknown_path_is_logged(client, caplog):
    caplog.set_level(logging.INFO)
    response = client.get('/v1/no-such-thing')
    assert response.status == 404
    records = _lines(caplog)
    assert len(records) == 1
    match = LINE.match(records[0].getMessage())
    assert match['status'] == '404'
    assert records[0].context.request_id == \
        response.headers['X-OpenStack-Request-ID']
