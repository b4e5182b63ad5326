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

"""Runs in the CXL host guest (standard library only): serves the calls
of ``composable/privsep/cxl.py`` over the guest's second serial port.

The guest holds this file as ``/opt/composable/guest_runner.py`` and
the module unchanged at ``/opt/composable/composable/privsep/cxl.py``;
beside it, a stand-in
``composable/privsep/__init__.py`` whose ``entrypoint`` is the function
itself (in the guest the caller is already root, as the privsep daemon
is on a host). One JSON object a line each way::

    -> {"id": 1, "call": "make_region", "args": ["mem0", 268435456]}
    <- {"id": 1, "result": {"region": "region0", ...}}
    <- {"id": 1, "error": {"type": "OSError", "errno": 16, "message": ...}}

Besides the module's functions it answers ``dax_write`` and ``dax_find``
(the test's own view of a DAX device's bytes), ``numa_fill`` (memory
filled on one NUMA node, as a tenant would) and ``node_memory_mib``.
"""

import ctypes
import json
import mmap
import os
import sys
import tty

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from composable.privsep import cxl  # noqa: E402

WINDOW = 32 << 20


def _align(dax):
    """A DAX device maps only whole multiples of its alignment."""
    return int(cxl._read(cxl.DAX, 'devices', dax, 'align',
                         default=str(2 << 20)))


def dax_write(dax, offset, data_hex):
    data = bytes.fromhex(data_hex)
    align = _align(cxl.check_name(dax))
    start = offset - offset % align
    length = (offset - start + len(data) + align - 1) // align * align
    fd = os.open('/dev/' + dax, os.O_RDWR)
    try:
        with mmap.mmap(fd, length, offset=start) as window:
            # No msync: a device-dax file refuses it (EINVAL).
            window[offset - start:offset - start + len(data)] = data
    finally:
        os.close(fd)
    return len(data)


def dax_find(dax, data_hex):
    """The first offset of the bytes in the DAX device, or -1."""
    data = bytes.fromhex(data_hex)
    size = int(cxl._read(cxl.DAX, 'devices', cxl.check_name(dax), 'size'))
    align = _align(dax)
    # Windows overlap by one alignment unit, so that no match is cut.
    fd = os.open('/dev/' + dax, os.O_RDONLY)
    try:
        offset = 0
        while offset < size:
            length = min(WINDOW + align, size - offset)
            with mmap.mmap(fd, length, offset=offset,
                           prot=mmap.PROT_READ) as window:
                found = window.find(data)
                if found >= 0:
                    return offset + found
            offset += WINDOW
    finally:
        os.close(fd)
    return -1


def numa_fill(node, size, data_hex):
    """Fill ``size`` bytes of anonymous memory bound to NUMA ``node``
    with the pattern, then free it (the pages keep their bytes): what a
    tenant's process leaves behind in the host's memory."""
    libc = ctypes.CDLL(None, use_errno=True)
    mask = ctypes.c_ulong(1 << int(node))
    # set_mempolicy(MPOL_BIND, &mask, maxnode): every page this process
    # takes from now on comes from that node.
    if libc.syscall(238, 2, ctypes.byref(mask), 64) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    pattern = bytes.fromhex(data_hex)
    with mmap.mmap(-1, size) as memory:
        memory.write(pattern * (size // len(pattern)))
    libc.syscall(238, 0, None, 0)
    return size


def node_memory_mib(node):
    """MemTotal of NUMA ``node`` in MiB; 0 when the node is gone."""
    try:
        with open('/sys/devices/system/node/node%d/meminfo' % int(node)) as f:
            for line in f:
                if 'MemTotal:' in line:
                    return int(line.split()[-2]) // 1024
    except FileNotFoundError:
        return 0
    return 0


EXTRA = {'dax_write': dax_write, 'dax_find': dax_find,
         'numa_fill': numa_fill, 'node_memory_mib': node_memory_mib}


def answer(request):
    try:
        name = request['call']
        function = EXTRA.get(name) or getattr(cxl, name)
        result = function(*request.get('args', ()))
        if isinstance(result, tuple):
            result = list(result)
        return {'id': request['id'], 'result': result}
    except OSError as exc:
        return {'id': request.get('id'),
                'error': {'type': 'OSError', 'errno': exc.errno,
                          'message': exc.strerror or str(exc)}}
    except Exception as exc:
        return {'id': request.get('id'),
                'error': {'type': type(exc).__name__, 'errno': None,
                          'message': str(exc)}}


def serve(port):
    fd = os.open(port, os.O_RDWR | os.O_NOCTTY)
    tty.setraw(fd)

    def send(obj):
        data = (json.dumps(obj) + '\n').encode()
        while data:
            data = data[os.write(fd, data):]

    send({'ready': True})
    pending = b''
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return
        pending += chunk
        while b'\n' in pending:
            line, pending = pending.split(b'\n', 1)
            line = line.strip()
            if not line.startswith(b'{'):
                continue
            send(answer(json.loads(line)))


if __name__ == '__main__':
    if sys.argv[1:] == ['--probe']:
        # The files loaded, for the guest's image.
        print(json.dumps(sorted(
            m.__file__ for m in list(sys.modules.values())
            if getattr(m, '__file__', None))))
    else:
        serve(sys.argv[1])
