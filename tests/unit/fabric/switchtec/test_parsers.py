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

"""The switchtec CLI output parsers on golden outputs.

The files under golden/ are modelled on the format strings of
switchtec-user (cli/fabric.c for the GFMS dumps, cli/main.c for
port-bind-info, the library's switchtec_perror for errors); see
golden/README.rst.
"""

import os

import pytest

from composable.fabric.switchtec import parsers

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'golden')


def golden(name):
    with open(os.path.join(GOLDEN, name)) as f:
        return f.read()


def test_pax_all():
    state = parsers.parse_pax_all(golden('gfms_dump_pax_all.txt'))
    assert state['pax_id'] == 0
    functions = {f['pdfid']: f for f in state['functions']}
    assert list(functions) == ['0x0100', '0x0101', '0x0102', '0x0110']
    assert functions['0x0100'] == {
        'function': 0, 'function_type': 'PF', 'ep_port': 8,
        'pdfid': '0x0100', 'vendor_id': '10de', 'product_id': '20b5',
        'class_code': None, 'bound': True, 'bound_pax_id': 0,
        'bound_phys_port': 0, 'bound_log_port': 1}
    assert functions['0x0101']['bound'] is False
    assert functions['0x0101']['function_type'] == 'SRIOV-PF'
    assert 'bound_log_port' not in functions['0x0101']
    assert functions['0x0102']['function_type'] == 'SRIOV-VF'
    assert (functions['0x0102']['bound_pax_id'],
            functions['0x0102']['bound_phys_port'],
            functions['0x0102']['bound_log_port']) == (1, 16, 3)
    # An endpoint behind a switch on port 12; the switch's own function
    # (a bridge, ENUM_ID 0x0001) is not an endpoint.
    assert functions['0x0110']['ep_port'] == 12
    assert functions['0x0110']['vendor_id'] == '144d'
    assert state['hvds'] == [
        {'hvd_id': 0, 'phys_port': 0, 'hfid': '0x0080',
         'logical_ports': {1: '0x0100', 2: None}},
        {'hvd_id': 10, 'phys_port': 4, 'hfid': '0x0081',
         'logical_ports': {1: None}},
    ]


def test_pax_all_class_code_when_printed():
    text = golden('gfms_dump_pax_all.txt').replace(
        '            VID-DID:    \t0x10de-0x20b5\n',
        '            VID-DID:    \t0x10de-0x20b5\n'
        '            Class Code: \t0x030200\n')
    state = parsers.parse_pax_all(text)
    assert state['functions'][0]['class_code'] == 0x030200
    assert parsers.kind_of_class(0x030200) == 'gpu'


@pytest.mark.parametrize('code,kind', [
    (0x030000, 'gpu'), (0x010802, 'nvme'), (0x020000, 'nic'),
    (0x010601, 'pci'), (0x120000, 'pci'), (None, 'pci')])
def test_kind_of_class(code, kind):
    assert parsers.kind_of_class(code) == kind


def test_pax_all_without_anything_bound_or_attached():
    text = ('PAX ID: 2 (SWFID: 0x0300)\nGeneral:\n'
            '    Physical Port Count:\t48\n\nFabric EPs:\n'
            '    Physical Port ID 8 (Not attached)\nHVDs:\n')
    assert parsers.parse_pax_all(text) == {'pax_id': 2, 'functions': [],
                                           'hvds': []}


@pytest.mark.parametrize('text', [
    '',
    'garbage\n',
    'gfms_db_dump: Permission denied\n',
    # Cut short: no HVDs section.
    'PAX ID: 0 (SWFID: 0x0100)\nGeneral:\nFabric EPs:\n',
    # A function without its PDFID.
    'PAX ID: 0 (SWFID: 0x0100)\nFabric EPs:\n'
    '    Physical Port ID 8 (EP attached):\n'
    '        Function 0 (PF): \n'
    '            VID-DID:    \t0x10de-0x20b5\nHVDs:\n',
    # Bound, but where is not said.
    'PAX ID: 0 (SWFID: 0x0100)\nFabric EPs:\n'
    '    Physical Port ID 8 (EP attached):\n'
    '        Function 0 (PF): \n'
    '            PDFID:      \t0x100\n'
    '            Binding:    \tBound\nHVDs:\n',
])
def test_pax_all_refuses_what_it_cannot_read(text):
    with pytest.raises(parsers.ParseError):
        parsers.parse_pax_all(text)


def test_pax_all_skips_lines_it_does_not_know():
    text = golden('gfms_dump_pax_all.txt').replace(
        'HVDs:\n', 'Some New Section:\n    Whatever: 1\nHVDs:\n')
    assert parsers.parse_pax_all(text) == parsers.parse_pax_all(
        golden('gfms_dump_pax_all.txt'))


def test_hvd_detail():
    detail = parsers.parse_hvd_detail(golden('gfms_dump_hvd_detail.txt'))
    assert detail == {
        'pax_id': 0, 'hvd_id': 0, 'phys_port': 0,
        'logical_ports': {
            1: {'pdfid': '0x0100', 'dsp_bdf': '41:01.0',
                'pci_address': '0000:43:00.0'},
            2: None}}


def test_hvd_detail_link_down():
    detail = parsers.parse_hvd_detail(
        golden('gfms_dump_hvd_detail_link_down.txt'))
    assert detail['logical_ports'][1] == {
        'pdfid': '0x0100', 'dsp_bdf': 'N/A', 'pci_address': None}


@pytest.mark.parametrize('text', ['', 'nonsense\n',
                                  'PAX ID: 0 (SWFID: 0x0100)\n'])
def test_hvd_detail_refuses_what_it_cannot_read(text):
    with pytest.raises(parsers.ParseError):
        parsers.parse_hvd_detail(text)


def test_port_bind_info_all():
    assert parsers.parse_port_bind_info(golden('port_bind_info_all.txt')) \
        == {12: {'state': 'bound', 'logical_port': 1, 'partition': 0},
            13: {'state': 'unbound', 'logical_port': None,
                 'partition': None},
            14: {'state': 'fail', 'logical_port': None, 'partition': None},
            15: {'state': 'in_progress', 'logical_port': None,
                 'partition': None}}


def test_port_bind_info_one():
    assert parsers.parse_port_bind_info(golden('port_bind_info_one.txt')) \
        == {13: {'state': 'unbound', 'logical_port': None,
                 'partition': None}}


@pytest.mark.parametrize('text', [
    '', 'garbage\n', 'bind state: Bound\n',
    'bind state: Bound\nphysical port 12\n',
    'physical port: all\nbind state: Unbound\nphysical port x\n'])
def test_port_bind_info_refuses_what_it_cannot_read(text):
    with pytest.raises(parsers.ParseError):
        parsers.parse_port_bind_info(text)


def test_errors():
    lines = golden('errors.txt').splitlines()
    assert [parsers.parse_error(line) for line in lines] == [
        {'what': 'gfms_bind', 'message': 'Function already bound',
         'mrpc': '0x84', 'code': '0x7'},
        {'what': 'port_unbind',
         'message': 'Logical bridge not bind to physical port',
         'mrpc': '0xc', 'code': '0x4'},
        {'what': 'gfms_db_dump', 'message': 'Permission denied',
         'mrpc': None, 'code': None},
        {'what': '/dev/switchtec7', 'message': 'No such file or directory',
         'mrpc': None, 'code': None},
    ]
    # The last error line is the one that counts.
    assert parsers.parse_error('\n'.join(lines))['what'] == \
        '/dev/switchtec7'
    assert parsers.parse_error('') is None
    assert parsers.parse_error('Segmentation fault (core dumped)') is None


@pytest.mark.parametrize('value,expected', [
    ('0x100', '0x0100'), ('0x0100', '0x0100'), ('256', '0x0100'),
    (256, '0x0100'), (' 0X1ff ', '0x01ff')])
def test_pdfid(value, expected):
    assert parsers.pdfid(value) == expected


@pytest.mark.parametrize('value', ['', 'abc', '0x10000', -1, True, None])
def test_pdfid_refused(value):
    with pytest.raises(ValueError):
        parsers.pdfid(value)


def test_pci_address():
    assert parsers.pci_address('43:00.0') == '0000:43:00.0'
    assert parsers.pci_address('A1:1f.7') == '0000:a1:1f.7'
    assert parsers.pci_address('N/A') is None
    assert parsers.pci_address(None) is None
