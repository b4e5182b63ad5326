#!/usr/bin/env python3
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

"""A stand-in for the ``switchtec`` CLI of switchtec-user, for tests.

It plays one PAX switch (GFMS commands) or one PSX/PFX switch (partition
commands) whose state is a JSON file named by ``FAKE_SWITCHTEC_STATE``;
every invocation is appended to the state's ``calls`` (its argv without
the program) before anything else, so tests can check exactly what was
run, even for a command that hangs.

Syntax as the real CLI's: ``switchtec fabric gfms_bind DEV -s N -p N -l N
-f PDFID``, ``fabric gfms_unbind DEV -s -p -l``, ``fabric gfms_dump DEV -t
PAX_ALL|HVD_DETAIL [-d HVD]``, ``port-bind DEV -p PART -l LOG -f PHYS``,
``port-unbind DEV -p PART -l LOG``, ``port-bind-info DEV [-f PHYS]``.
Command names take ``-`` or ``_``; long options are underscore-only
(``--host_sw_idx``), as in argconfig. Silent on success; errors go to
stderr as ``<what>: <message> (MRPC: 0x.., error: 0x..)`` with a non-zero
exit. Numbers take a ``0x`` prefix (the CLI uses strtol with base 0).

State keys (all optional but the ones a command needs)::

    device       the device the switch answers to
    pax_id, swfid
    ep_ports     [{"phys_port", "functions": [{"function", "type",
                  "pdfid", "vid", "did", "class_code"}]}]
    hvds         [{"hvd_id", "phys_port", "hfid", "usp_bdf",
                  "logical_ports": {"<log port>": pdfid or null}}]
    remote       {"<pdfid>": [sw, phys, log]}: bound on another switch
    part_ports   {"<phys port>": null, [partition, logical port], "fail"
                  or "in_progress"}
    hang         {"<command>": seconds}: sleep before answering
    garbage      {"<command>": text}: print it and exit 0
    fail         {"<command>": [message, mrpc, code]}: fail like that

``<command>`` is the normalised name: ``gfms_bind``, ``gfms_dump``,
``port_bind``...; ``gfms_dump.HVD_DETAIL`` (or ``.PAX_ALL``) names one
dump type only. MRPC and error codes are illustrative.
"""

import json
import os
import sys
import time

STATE_VAR = 'FAKE_SWITCHTEC_STATE'

MRPC_GFMS = 0x84
MRPC_PORT_BIND = 0xc

# part_ports states port-bind-info prints as "bind_info: ..."
BIND_INFO = {'fail': 'Fail', 'in_progress': 'In Progress'}

# command -> {long name: short letter}
OPTIONS = {
    'gfms_bind': {'host_sw_idx': 's', 'phys_port_id': 'p',
                  'log_port_id': 'l', 'pdfid': 'f'},
    'gfms_unbind': {'host_sw_idx': 's', 'phys_port_id': 'p',
                    'log_port_id': 'l'},
    'gfms_dump': {'type': 't', 'hvd_id': 'd', 'fab_pid': 'f',
                  'ep_pid': 'e'},
    'port_bind': {'partition': 'p', 'logical': 'l', 'physical': 'f'},
    'port_unbind': {'partition': 'p', 'logical': 'l'},
    'port_bind_info': {'physical': 'f'},
}


class Failure(Exception):
    def __init__(self, what, message, mrpc=None, code=None, rc=1):
        super().__init__(message)
        self.what, self.message, self.mrpc, self.code, self.rc = (
            what, message, mrpc, code, rc)

    def __str__(self):
        if self.mrpc is None:
            return '%s: %s' % (self.what, self.message)
        return '%s: %s (MRPC: 0x%x, error: 0x%x)' % (
            self.what, self.message, self.mrpc, self.code)


def number(text):
    return int(text, 0)


def parse(argv):
    """(command, device, {short option: value})."""
    if argv and argv[0] == 'fabric':
        argv = argv[1:]
    if not argv:
        raise Failure('switchtec', 'no command given')
    command = argv[0].replace('-', '_')
    if command not in OPTIONS:
        raise Failure('switchtec', "'%s' is not a switchtec command" %
                      argv[0])
    longs = OPTIONS[command]
    shorts = set(longs.values())
    device = None
    values = {}
    rest = argv[1:]
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg.startswith('-'):
            name = arg.lstrip('-')
            if name in longs:
                letter = longs[name]
            elif len(name) == 1 and name in shorts:
                letter = name
            else:
                raise Failure(command, 'unrecognized option %r' % arg)
            if i + 1 >= len(rest):
                raise Failure(command, 'option %r requires an argument' %
                              arg)
            values[letter] = rest[i + 1]
            i += 2
            continue
        if device is not None:
            raise Failure(command, 'unexpected argument %r' % arg)
        device = arg
        i += 1
    if device is None:
        raise Failure(command, 'missing device')
    return command, device, values


def required(command, values, *letters):
    out = []
    for letter in letters:
        if letter not in values:
            raise Failure(command, 'option -%s is required' % letter)
        try:
            out.append(number(values[letter]))
        except ValueError:
            raise Failure(command, "Expected integer argument for '-%s' "
                          "but got '%s'!" % (letter, values[letter]))
    return out


def bdf(bus, dev=0, fn=0):
    return '%02x:%02x.%x' % (bus, dev, fn)


def holder(state, pdfid):
    for hvd in state.get('hvds', []):
        for log, bound in hvd['logical_ports'].items():
            if bound == pdfid:
                return state.get('pax_id', 0), hvd['phys_port'], int(log)
    remote = state.get('remote', {}).get(str(pdfid))
    return tuple(remote) if remote else None


def functions(state):
    for port in state.get('ep_ports', []):
        for func in port.get('functions', []):
            yield port, func


def pax_all(state):
    out = ['PAX ID: %d (SWFID: 0x%04x)' % (state.get('pax_id', 0),
                                           number(state.get('swfid',
                                                            '0x0100'))),
           'General:',
           '    Physical Port Count:\t%d' % 48,
           '    HVD Count:          \t%d' % len(state.get('hvds', [])),
           '    EP Count:           \t%d' % len(state.get('ep_ports', [])),
           '    PDFID range:        \t0x0100 - 0x01ff',
           '', 'Fabric EPs:']
    for port in state.get('ep_ports', []):
        if not port.get('functions'):
            out.append('    Physical Port ID %d (Not attached)' %
                       port['phys_port'])
            continue
        out.append('    Physical Port ID %d (EP attached):' %
                   port['phys_port'])
        for func in port['functions']:
            out.append('        Function %d (%s): ' % (
                func.get('function', 0), func.get('type', 'PF')))
            out.append('            PDFID:      \t0x%02x' % func['pdfid'])
            out.append('            VID-DID:    \t0x%04x-0x%04x' % (
                number(func['vid']), number(func['did'])))
            if func.get('class_code') is not None:
                out.append('            Class Code: \t0x%06x' %
                           number(func['class_code']))
            bound = holder(state, func['pdfid'])
            if bound:
                out += ['            Binding:    \tBound',
                        '                Bound PAX ID          : %d' %
                        bound[0],
                        '                Bound HVD Physical PID: %d' %
                        bound[1],
                        '                Bound HVD Logical PID : %d' %
                        bound[2]]
            else:
                out.append('            Binding:    \tUnbound')
            out.append('            BAR[0]:     \t16M Bytes (Memory, '
                       '64-bit, Prefetchable)')
    out.append('HVDs:')
    for hvd in state.get('hvds', []):
        out.append('    HVD %x (Physical Port ID: %d, HFID: 0x%04x):' % (
            hvd['hvd_id'], hvd['phys_port'], number(hvd.get('hfid',
                                                            '0x0080'))))
        for log in sorted(hvd['logical_ports'], key=int):
            bound = hvd['logical_ports'][log]
            if bound is None:
                out.append('        Logical Port ID %d:    \tUnbound' %
                           int(log))
            else:
                out.append('        Logical Port ID %d:    \tBound to '
                           'PDFID 0x%04x' % (int(log), bound))
    return '\n'.join(out) + '\n'


def hvd_detail(state, hvd_id):
    hvd = next((h for h in state.get('hvds', []) if h['hvd_id'] == hvd_id),
               None)
    if hvd is None:
        raise Failure('gfms_db_dump', 'Invalid HVD index', MRPC_GFMS, 0x1)
    link = hvd.get('link_up', True)
    usp = number(hvd.get('usp_bdf', '0x40'))
    out = ['PAX ID: %d (SWFID: 0x%04x)' % (state.get('pax_id', 0),
                                           number(state.get('swfid',
                                                            '0x0100'))),
           '    HVD %x:' % hvd_id,
           '        Physical Port ID:  \t\t%d' % hvd['phys_port'],
           '        HFID:              \t\t0x%04x' % number(
               hvd.get('hfid', '0x0080')),
           '        USP Status:        \t\t%s' % ('LINK UP' if link
                                                  else 'LINK DOWN'),
           '        USP BDF:           \t\t%s' % (bdf(usp) if link
                                                  else 'N/A'),
           '        VEPs (1):',
           '            VEP 0:',
           '                Type:\t\t\tEP_MGMT',
           '                BDF: \t\t\t%s' % (bdf(usp + 1, 0, 1) if link
                                              else 'N/A'),
           '        Logical Ports (%d):' % len(hvd['logical_ports'])]
    for log in sorted(hvd['logical_ports'], key=int):
        bound = hvd['logical_ports'][log]
        if bound is None:
            out.append('            Logical PID %d:\t\tUnbound' % int(log))
            continue
        dsp = bdf(usp + 1, int(log)) if link else 'N/A'
        ep = bdf(usp + 2 + int(log)) if link else 'N/A'
        out.append('            Logical PID %d:\t\tBound to PDFID 0x%04x '
                   '(DSP BDF: %s, EP BDF: %s)' % (int(log), bound, dsp, ep))
    out.append('        Logical Port P2P enable bitmap:\t0x%016x' % 0)
    return '\n'.join(out) + '\n'


def gfms_bind(state, values):
    sw, phys, log = required('gfms_bind', values, 's', 'p', 'l')
    if 'f' not in values:
        raise Failure('gfms_bind', 'option -f is required')
    pdfids = [number(p) for p in values['f'].split(',')]
    known = {func['pdfid'] for _port, func in functions(state)}
    if sw != state.get('pax_id', 0):
        raise Failure('gfms_bind', 'Invalid switch index', MRPC_GFMS, 0x2)
    hvd = next((h for h in state.get('hvds', [])
                if h['phys_port'] == phys), None)
    if hvd is None:
        raise Failure('gfms_bind', 'Invalid host physical port',
                      MRPC_GFMS, 0x3)
    if str(log) not in hvd['logical_ports']:
        raise Failure('gfms_bind', 'Invalid logical port', MRPC_GFMS, 0x4)
    if hvd['logical_ports'][str(log)] is not None:
        raise Failure('gfms_bind', 'Logical port already bound',
                      MRPC_GFMS, 0x5)
    for pdfid in pdfids:
        if pdfid not in known:
            raise Failure('gfms_bind', 'Invalid PDFID', MRPC_GFMS, 0x6)
        if holder(state, pdfid):
            raise Failure('gfms_bind', 'Function already bound',
                          MRPC_GFMS, 0x7)
    hvd['logical_ports'][str(log)] = pdfids[0]


def gfms_unbind(state, values):
    sw, phys, log = required('gfms_unbind', values, 's', 'p', 'l')
    hvd = next((h for h in state.get('hvds', [])
                if h['phys_port'] == phys), None)
    if sw != state.get('pax_id', 0) or hvd is None or \
            str(log) not in hvd['logical_ports']:
        raise Failure('gfms_unbind', 'Invalid host port', MRPC_GFMS, 0x3)
    if hvd['logical_ports'][str(log)] is None:
        raise Failure('gfms_unbind', 'Logical port not bound', MRPC_GFMS,
                      0x8)
    hvd['logical_ports'][str(log)] = None


def bind_info(state, values):
    ports = state.get('part_ports', {})
    out = []
    if 'f' in values:
        wanted = [str(required('port_bind_info', values, 'f')[0])]
        if wanted[0] not in ports:
            raise Failure('port_bind_info', 'Invalid physical port',
                          MRPC_PORT_BIND, 0x1)
    else:
        out.append('physical port: all')
        wanted = sorted(ports, key=int)
    for phys in wanted:
        bound = ports[phys]
        if bound is None:
            out += ['bind state: Unbound', 'physical port %s' % phys]
        elif isinstance(bound, str):
            out += ['bind_info: %s' % BIND_INFO[bound],
                    'physical port %s' % phys]
        else:
            out += ['bind state: Bound',
                    'physical port %s bound to %d, partition %d' % (
                        phys, bound[1], bound[0])]
    return '\n'.join(out) + '\n'


def port_bind(state, values):
    part, log, phys = required('port_bind', values, 'p', 'l', 'f')
    ports = state.get('part_ports', {})
    if str(phys) not in ports:
        raise Failure('port_bind', 'Invalid physical port', MRPC_PORT_BIND,
                      0x1)
    if ports[str(phys)] is not None:
        raise Failure('port_bind', 'Physical port already bound',
                      MRPC_PORT_BIND, 0x2)
    if [part, log] in ports.values():
        raise Failure('port_bind', 'Logical port already bound',
                      MRPC_PORT_BIND, 0x3)
    ports[str(phys)] = [part, log]


def port_unbind(state, values):
    part, log = required('port_unbind', values, 'p', 'l')
    ports = state.get('part_ports', {})
    for phys, bound in ports.items():
        if bound == [part, log]:
            ports[phys] = None
            return
    raise Failure('port_unbind', 'Logical bridge not bind to physical port',
                  MRPC_PORT_BIND, 0x4)


def main(argv):
    path = os.environ[STATE_VAR]
    with open(path) as f:
        state = json.load(f)
    state.setdefault('calls', []).append(argv)
    with open(path, 'w') as f:
        json.dump(state, f)
    try:
        command, device, values = parse(argv)
        if state.get('device') and device != state['device']:
            raise Failure(device, 'No such file or directory')
        keys = [command]
        if command == 'gfms_dump':
            keys.insert(0, 'gfms_dump.%s' % values.get('t', '').upper())

        def fault(kind):
            faults = state.get(kind, {})
            return next((faults[k] for k in keys if k in faults), None)

        delay = fault('hang')
        if delay:
            time.sleep(delay)
        garbage = fault('garbage')
        if garbage is not None:
            sys.stdout.write(garbage)
            return 0
        fail = fault('fail')
        if fail:
            raise Failure(command, fail[0], number(fail[1]),
                          number(fail[2]))
        out = ''
        if command == 'gfms_dump':
            kind = values.get('t', 'PAX_ALL').upper()
            if kind == 'PAX_ALL':
                out = pax_all(state)
            elif kind == 'HVD_DETAIL':
                if 'd' not in values:
                    raise Failure('gfms_dump', 'The --hvd_id|-d argument '
                                  'is required for -t HVD!')
                out = hvd_detail(state, number(values['d']))
            else:
                raise Failure('gfms_dump', "Unexpected choice '%s'" % kind)
        elif command == 'gfms_bind':
            gfms_bind(state, values)
        elif command == 'gfms_unbind':
            gfms_unbind(state, values)
        elif command == 'port_bind_info':
            out = bind_info(state, values)
        elif command == 'port_bind':
            port_bind(state, values)
        elif command == 'port_unbind':
            port_unbind(state, values)
    except Failure as exc:
        sys.stderr.write('%s\n' % exc)
        return exc.rc
    with open(path) as f:
        calls = json.load(f)['calls']
    state['calls'] = calls
    with open(path, 'w') as f:
        json.dump(state, f)
    sys.stdout.write(out)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
