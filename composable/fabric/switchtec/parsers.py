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

"""Parsers of the ``switchtec`` CLI's text output.

The CLI has no machine-readable output: these functions read the text
that switchtec-user prints, line by line, and keep only what the driver
needs. Lines they do not know (a newer CLI adds some) are skipped; output
without the lines every dump has (the ``PAX ID:`` header, the section
titles) is refused with :class:`ParseError`, so an unexpected answer is
never taken for "nothing is bound".

Shapes read (the indentation and tabs of the CLI do not matter here):

``fabric gfms_dump -t PAX_ALL``::

    PAX ID: 0 (SWFID: 0x0100)
    General:
        ...
    Fabric EPs:
        Physical Port ID 8 (EP attached):
            Function 0 (PF):
                PDFID:      0x100
                VID-DID:    0x10de-0x20b5
                Binding:    Bound
                    Bound PAX ID          : 0
                    Bound HVD Physical PID: 0
                    Bound HVD Logical PID : 1
        Physical Port ID 9 (Not attached)
    HVDs:
        HVD 0 (Physical Port ID: 0, HFID: 0x0080):
            Logical Port ID 1:      Bound to PDFID 0x0100
            Logical Port ID 2:      Unbound

``fabric gfms_dump -t HVD_DETAIL -d N``: the ``Logical PID N: Bound to
PDFID 0x... (DSP BDF: bb:dd.f, EP BDF: bb:dd.f)`` lines; ``EP BDF`` is the
address the host enumerates the function at (``N/A`` while the host's
link is down).

``port-bind-info``: ``bind state: Bound`` followed by ``physical port P
bound to L, partition N``, or ``bind state: Unbound`` and ``physical port
P``; ``bind_info: Fail`` / ``bind_info: In Progress`` and ``physical port
P``.

Errors (stderr), from the library's error printer: ``<what>: <message>
(MRPC: 0x<command>, error: 0x<code>)`` for an error the switch firmware
returned, ``<what>: <message>`` for the others.
"""

import re


class ParseError(ValueError):
    """The CLI printed something these parsers cannot read."""


_PAX_HEADER = re.compile(r'^PAX ID:\s*(\d+)\s*\(SWFID:\s*(0x[0-9a-fA-F]+)\)')
_EP_PORT = re.compile(
    r'^Physical Port ID (\d+) \((EP attached|Switch attached|Not attached)'
    r'\)')
_DSP_EP = re.compile(r'^Physical Port ID (\d+) \(DSP P2P ENUMID')
_FUNCTION = re.compile(r'^Function (\d+)(?: \(([^)]*)\))?:')
_PDFID = re.compile(r'^PDFID:\s*(0x[0-9a-fA-F]+)$')
_VID_DID = re.compile(r'^VID-DID:\s*0x([0-9a-fA-F]+)-0x([0-9a-fA-F]+)$')
_CLASS = re.compile(r'^Class Code:\s*0x([0-9a-fA-F]+)$')
_BINDING = re.compile(r'^Binding:\s*(Bound|Unbound)$')
_BOUND_FIELD = re.compile(
    r'^Bound (PAX ID|HVD Physical PID|HVD Logical PID)\s*:\s*(\d+)$')
_HVD = re.compile(r'^HVD ([0-9a-fA-F]+) \(Physical Port ID: (\d+), '
                  r'HFID: (0x[0-9a-fA-F]+)\):$')
_HVD_LOG_PORT = re.compile(
    r'^Logical Port ID (\d+):\s*(?:Bound to PDFID (0x[0-9a-fA-F]+)|'
    r'(Unbound))$')
_DETAIL_HVD = re.compile(r'^HVD ([0-9a-fA-F]+):$')
_DETAIL_PHYS = re.compile(r'^Physical Port ID:\s*(\d+)$')
_DETAIL_LOG_PORT = re.compile(
    r'^Logical PID (\d+):\s*(?:Bound to PDFID (0x[0-9a-fA-F]+) '
    r'\(DSP BDF: (\S+), EP BDF: ([^)\s]+)\)|(Unbound))$')
_BDF = re.compile(r'^([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$')
_BIND_STATE = re.compile(r'^bind state:\s*(Bound|Unbound)$')
_BIND_INFO = re.compile(r'^bind_info:\s*(Fail|In Progress)$')
_PHYS_BOUND = re.compile(
    r'^physical port (\d+) bound to (\d+), partition (\d+)$')
_PHYS_ONLY = re.compile(r'^physical port (\d+)$')
_ERROR = re.compile(
    r'^(?P<what>[A-Za-z0-9_ ./@\[\]-]+): (?P<msg>.*?)'
    r'(?: \(MRPC: (?P<mrpc>0x[0-9a-fA-F]+), '
    r'error: (?P<code>0x[0-9a-fA-F]+)\))?$')

_BOUND_KEYS = {'PAX ID': 'bound_pax_id',
               'HVD Physical PID': 'bound_phys_port',
               'HVD Logical PID': 'bound_log_port'}


def pdfid(value):
    """A PDFID as the CLI prints it, ``"0x0100"``: from ``"0x100"``,
    ``"256"`` or 256. Raises ValueError on anything else."""
    if isinstance(value, bool):
        raise ValueError('%r is not a PDFID' % (value,))
    if isinstance(value, int):
        number = value
    else:
        text = str(value).strip()
        number = int(text, 16) if text.lower().startswith('0x') else \
            int(text, 10)
    if not 0 <= number <= 0xffff:
        raise ValueError('PDFID %r is out of range' % (value,))
    return '0x%04x' % number


def _lines(text):
    for raw in (text or '').splitlines():
        line = raw.strip()
        if line:
            yield line


def kind_of_class(class_code):
    """The device kind of a PCI class code (an int), as discovery reports
    it."""
    if class_code is None:
        return 'pci'
    base, sub = class_code >> 16, (class_code >> 8) & 0xff
    if base == 0x03:
        return 'gpu'
    if base == 0x01 and sub == 0x08:
        return 'nvme'
    if base == 0x02:
        return 'nic'
    return 'pci'


def parse_pax_all(text):
    """``gfms_dump -t PAX_ALL`` as ``{"pax_id", "functions", "hvds"}``.

    ``functions``: one dict per endpoint function, in the order printed:
    ``pdfid`` (``"0x0100"``), ``function``, ``function_type`` (``"PF"``,
    ``"SRIOV-VF"``...), ``ep_port`` (the physical port it sits behind),
    ``vendor_id`` / ``product_id`` (``"10de"``), ``class_code`` (an int
    or None: the CLI prints it only for some functions), ``bound``, and
    when bound ``bound_pax_id``, ``bound_phys_port``, ``bound_log_port``.

    ``hvds``: one dict per host virtual domain: ``hvd_id`` (int),
    ``phys_port``, ``hfid`` and ``logical_ports`` ({port: pdfid or
    None}).
    """
    pax_id = None
    section = None
    functions = []
    hvds = []
    ep_port = None
    in_switch_functions = False
    func = None
    hvd = None
    seen_sections = set()

    def close_function():
        if func is not None:
            if func.get('pdfid') is None:
                raise ParseError('function %s of physical port %s has no '
                                 'PDFID' % (func['function'], ep_port))
            functions.append(func)

    for line in _lines(text):
        match = _PAX_HEADER.match(line)
        if match and pax_id is None:
            pax_id = int(match.group(1))
            continue
        if line in ('General:', 'Fabric EPs:', 'HVDs:'):
            close_function()
            func = None
            section = line[:-1]
            seen_sections.add(section)
            continue
        if pax_id is None:
            raise ParseError('no "PAX ID:" header before %r' % line[:80])
        if section == 'Fabric EPs':
            match = _EP_PORT.match(line) or _DSP_EP.match(line)
            if match:
                close_function()
                func = None
                ep_port = int(match.group(1))
                in_switch_functions = False
                continue
            if line == 'Switch Functions:':
                close_function()
                func = None
                in_switch_functions = True
                continue
            if line == 'Switch attached EPs:':
                in_switch_functions = False
                continue
            if in_switch_functions:
                # The functions of a switch behind the port are not
                # endpoints a host can be given.
                continue
            match = _FUNCTION.match(line)
            if match:
                close_function()
                if ep_port is None:
                    raise ParseError('a function outside a physical port')
                func = {'function': int(match.group(1)),
                        'function_type': match.group(2),
                        'ep_port': ep_port, 'pdfid': None,
                        'vendor_id': None, 'product_id': None,
                        'class_code': None, 'bound': False}
                continue
            if func is None:
                continue
            match = _PDFID.match(line)
            if match:
                func['pdfid'] = pdfid(match.group(1))
                continue
            match = _VID_DID.match(line)
            if match:
                func['vendor_id'] = '%04x' % int(match.group(1), 16)
                func['product_id'] = '%04x' % int(match.group(2), 16)
                continue
            match = _CLASS.match(line)
            if match:
                func['class_code'] = int(match.group(1), 16)
                continue
            match = _BINDING.match(line)
            if match:
                func['bound'] = match.group(1) == 'Bound'
                continue
            match = _BOUND_FIELD.match(line)
            if match:
                func[_BOUND_KEYS[match.group(1)]] = int(match.group(2))
                continue
        elif section == 'HVDs':
            match = _HVD.match(line)
            if match:
                hvd = {'hvd_id': int(match.group(1), 16),
                       'phys_port': int(match.group(2)),
                       'hfid': match.group(3), 'logical_ports': {}}
                hvds.append(hvd)
                continue
            match = _HVD_LOG_PORT.match(line)
            if match:
                if hvd is None:
                    raise ParseError('a logical port outside an HVD')
                bound = match.group(2)
                hvd['logical_ports'][int(match.group(1))] = (
                    pdfid(bound) if bound else None)
                continue
    close_function()
    if pax_id is None:
        raise ParseError('no "PAX ID:" header')
    missing = {'Fabric EPs', 'HVDs'} - seen_sections
    if missing:
        raise ParseError('no %s section' % ', '.join(sorted(missing)))
    for func in functions:
        if func['bound'] and 'bound_log_port' not in func:
            raise ParseError('function %s is bound but the dump does not '
                             'say where' % func['pdfid'])
    return {'pax_id': pax_id, 'functions': functions, 'hvds': hvds}


def pci_address(bdf):
    """``"42:00.0"`` as ``"0000:42:00.0"``; None for ``N/A``. The CLI
    prints no PCI domain: the host sees the fabric in domain 0."""
    match = _BDF.match(bdf or '')
    if not match:
        return None
    return '0000:%s:%s.%s' % (match.group(1).lower(), match.group(2).lower(),
                              match.group(3))


def parse_hvd_detail(text):
    """``gfms_dump -t HVD_DETAIL`` as ``{"pax_id", "hvd_id", "phys_port",
    "logical_ports"}``; ``logical_ports`` maps each logical port to None
    (unbound) or ``{"pdfid", "dsp_bdf", "pci_address"}`` (the address is
    None while the host's link is down)."""
    pax_id = hvd_id = phys_port = None
    ports = {}
    for line in _lines(text):
        match = _PAX_HEADER.match(line)
        if match and pax_id is None:
            pax_id = int(match.group(1))
            continue
        if pax_id is None:
            raise ParseError('no "PAX ID:" header before %r' % line[:80])
        match = _DETAIL_HVD.match(line)
        if match and hvd_id is None:
            hvd_id = int(match.group(1), 16)
            continue
        match = _DETAIL_PHYS.match(line)
        if match and phys_port is None:
            phys_port = int(match.group(1))
            continue
        match = _DETAIL_LOG_PORT.match(line)
        if match:
            if match.group(5):
                ports[int(match.group(1))] = None
            else:
                ports[int(match.group(1))] = {
                    'pdfid': pdfid(match.group(2)),
                    'dsp_bdf': match.group(3),
                    'pci_address': pci_address(match.group(4))}
    if pax_id is None or hvd_id is None:
        raise ParseError('not an HVD_DETAIL dump')
    return {'pax_id': pax_id, 'hvd_id': hvd_id, 'phys_port': phys_port,
            'logical_ports': ports}


def parse_port_bind_info(text):
    """``port-bind-info`` as {physical port: {"state", "logical_port",
    "partition"}}; ``state`` is ``bound``, ``unbound``, ``fail`` or
    ``in_progress``."""
    ports = {}
    state = None
    recognised = False
    for line in _lines(text):
        if line == 'physical port: all':
            recognised = True
            continue
        match = _BIND_STATE.match(line)
        if match:
            state = match.group(1).lower()
            recognised = True
            continue
        match = _BIND_INFO.match(line)
        if match:
            state = match.group(1).lower().replace(' ', '_')
            recognised = True
            continue
        match = _PHYS_BOUND.match(line)
        if match and state == 'bound':
            ports[int(match.group(1))] = {
                'state': state, 'logical_port': int(match.group(2)),
                'partition': int(match.group(3))}
            state = None
            continue
        match = _PHYS_ONLY.match(line)
        if match and state is not None and state != 'bound':
            ports[int(match.group(1))] = {
                'state': state, 'logical_port': None, 'partition': None}
            state = None
            continue
        raise ParseError('unexpected line %r' % line[:80])
    if not recognised:
        raise ParseError('not port-bind-info output')
    if state is not None:
        raise ParseError('a bind state without its physical port')
    return ports


def parse_error(stderr):
    """The error the CLI printed: ``{"what", "message", "mrpc", "code"}``
    (``mrpc`` and ``code`` are None for errors that are not the
    firmware's), or None when stderr holds no line of that shape."""
    found = None
    for line in _lines(stderr):
        match = _ERROR.match(line)
        if match:
            found = {'what': match.group('what'),
                     'message': match.group('msg'),
                     'mrpc': match.group('mrpc'),
                     'code': match.group('code')}
    return found
