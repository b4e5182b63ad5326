#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

import argparse

from osc_lib import exceptions
import pytest

from composable.cli import utils


@pytest.mark.parametrize('text, expected', [
    ('1024', 1024),
    ('1', 1),
    ('512MiB', 512),
    ('512M', 512),
    ('512mb', 512),
    ('1GiB', 1024),
    ('1gib', 1024),
    ('2G', 2048),
    ('2GB', 2048),
    ('1.5G', 1536),
    ('1T', 1024 * 1024),
    ('1TiB', 1024 * 1024),
    ('1048576K', 1024),
    ('1048576KiB', 1024),
    (' 4 GiB ', 4096),
])
def test_parse_size(text, expected):
    assert utils.parse_size(text) == expected


@pytest.mark.parametrize('text', [
    '', 'abc', 'G', '-1', '-1G', '1X', '1GiBs', '1.5', '0.3G', '1K',
    '1,5G', '1 2G', '0', '0G',
])
def test_parse_size_rejects(text):
    with pytest.raises(exceptions.CommandError) as info:
        utils.parse_size(text)
    assert 'Invalid size' in str(info.value)


def test_parse_size_zero_allowed_for_reserved():
    assert utils.parse_size('0', allow_zero=True) == 0
    assert utils.parse_size('0GiB', allow_zero=True) == 0


def test_size_type_is_an_argparse_type():
    parser = argparse.ArgumentParser()
    parser.add_argument('--memory', type=utils.size_type())
    assert parser.parse_args(['--memory', '2GiB']).memory == 2048
    with pytest.raises(SystemExit):
        parser.parse_args(['--memory', 'lots'])


@pytest.mark.parametrize('text, expected', [
    ('2026-11-22T10:00:00Z', '2026-11-22T10:00:00Z'),
    ('2026-11-22T10:00:00', '2026-11-22T10:00:00Z'),
    ('2026-11-22T10:00', '2026-11-22T10:00:00Z'),
    ('2026-11-22T11:30:00+01:00', '2026-11-22T10:30:00Z'),
    ('2026-11-22T05:00:00-05:00', '2026-11-22T10:00:00Z'),
    ('2026-11-22T10:00:00.123456Z', '2026-11-22T10:00:00Z'),
    ('2026-11-22', '2026-11-22T00:00:00Z'),
    ('2026-11-22 10:00:00z', '2026-11-22T10:00:00Z'),
])
def test_parse_time(text, expected):
    assert utils.parse_time(text) == expected


@pytest.mark.parametrize('text', ['tomorrow', '2026-13-01T00:00:00Z',
                                  '10:00', ''])
def test_parse_time_rejects(text):
    with pytest.raises(exceptions.CommandError):
        utils.parse_time(text)


def test_parse_key_value():
    assert utils.parse_key_value('a=b') == ('a', 'b')
    assert utils.parse_key_value('url=http://x/?a=b') == (
        'url', 'http://x/?a=b')
    assert utils.parse_key_value('empty=') == ('empty', '')
    for bad in ('novalue', '=value'):
        with pytest.raises(argparse.ArgumentTypeError):
            utils.parse_key_value(bad)


def test_positive_and_non_negative_int():
    assert utils.positive_int('3') == 3
    assert utils.non_negative_int('0') == 0
    for bad in ('0', '-1', 'x'):
        with pytest.raises(argparse.ArgumentTypeError):
            utils.positive_int(bad)
    for bad in ('-1', 'x'):
        with pytest.raises(argparse.ArgumentTypeError):
            utils.non_negative_int(bad)


def test_show_hides_links_and_keeps_structures():
    item = {'uuid': 'u', 'name': 'n', 'traits': ['A', 'B'],
            'links': [{'rel': 'self', 'href': 'x'}], 'total': 3}
    columns, values = utils.show(item)
    assert columns == ('uuid', 'name', 'total', 'traits')
    assert values[3].machine_readable() == ['A', 'B']


def test_delete_all_reports_each_failure():
    deleted = []

    def delete(ident):
        if ident.startswith('bad'):
            raise exceptions.NotFound(404, 'Lease %s not found' % ident)
        deleted.append(ident)

    class Log(object):
        def __init__(self):
            self.errors = []

        def error(self, msg, *args):
            self.errors.append(msg % args)

    log = Log()
    with pytest.raises(exceptions.CommandError) as info:
        utils.delete_all(log, ['a', 'bad1', 'b', 'bad2'], delete, 'lease')
    assert deleted == ['a', 'b']
    assert '2 of 4 leases failed' in str(info.value)
    assert len(log.errors) == 2
    assert 'bad1' in log.errors[0] and 'not found' in log.errors[0]
    utils.delete_all(log, ['c'], delete, 'lease')
    assert deleted == ['a', 'b', 'c']
