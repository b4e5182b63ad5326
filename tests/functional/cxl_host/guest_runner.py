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
the module unchanged at ``/opt/composable/composable/privsep/cxl.py``
(and its errors.py); beside it, a stand-in
``composable/privsep/__init__.py`` whose ``entrypoint`` is the function
itself (in the guest the caller is already root, as the privsep daemon
is on a host). One JSON object a line each way::

    -> {"id": 1, "call": "make_region", "args": ["mem0", 268435456]}
    <- {"id": 1, "result": {"region": "region0", ...}}
    <- {"id": 1, "error": {"type": "CxlError", "code": "busy",
                           "message": ...}}

(``type`` OSError with its ``errno``, or another exception's name, for
the test's own functions below and the module's plain readers.)

Besides the module's functions it answers ``dax_write`` and ``dax_find``
(the test's own view of a DAX device's bytes), ``numa_fill`` (memory
filled on one NUMA node, as a tenant would), ``node_memory_mib``,
``node_free_mib``, ``hog_start``/``hog_alive``/``hog_stop`` (a process
that keeps memory on a node, some of it unmovable for now) and
``offline_probe`` (what the kernel does with a plain write of
``offline``).
"""

import ctypes
import errno
import json
import mmap
import os
import signal
import subprocess
import sys
import time
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


def node_free_mib(node):
    """MemFree of NUMA ``node`` in MiB."""
    with open('/sys/devices/system/node/node%d/meminfo' % int(node)) as f:
        for line in f:
            if 'MemFree:' in line:
                return int(line.split()[-2]) // 1024
    return 0


# A tenant's process holding memory: ``node_mib`` MiB bound to the CXL
# node, every page written; one page in each ``pin_mib`` MiB of it
# spliced into a pipe (vmsplice: the pipe holds a reference to the page,
# as I/O in flight does, so the kernel cannot migrate it until the pipe
# is read); then, with ``leave_mib`` >= 0, the rest of the host's
# memory (node 0) taken down to ``leave_mib`` MiB free. It says "ready"
# and waits for its stdin to close. Its oom_score_adj is -1000, as is
# this runner's (the OOM killer must not end either).
HOG = r'''
import ctypes, mmap, sys
node, node_mib, pin_mib, leave_mib = (int(a) for a in sys.argv[1:5])
with open('/proc/self/oom_score_adj', 'w') as f:
    f.write('-1000')
libc = ctypes.CDLL(None, use_errno=True)
def bind(n):
    mask = ctypes.c_ulong(1 << n)
    if libc.syscall(238, 2, ctypes.byref(mask), 64) != 0:
        raise OSError(ctypes.get_errno(), 'set_mempolicy')
def free_mib(n):
    with open('/sys/devices/system/node/node%d/meminfo' % n) as f:
        for line in f:
            if 'MemFree:' in line:
                return int(line.split()[-2]) // 1024
held = []
def take(mib):
    m = mmap.mmap(-1, mib << 20)
    for off in range(0, mib << 20, 4096):
        m[off] = 0x5a
    held.append(m)
    return m
bind(node)
filled = take(node_mib)
pinned = 0
if pin_mib:
    class Iovec(ctypes.Structure):
        _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
    base = ctypes.addressof(ctypes.c_char.from_buffer(filled))
    offsets = range(0, node_mib << 20, pin_mib << 20)
    iov = (Iovec * len(offsets))(*[Iovec(base + o, 4096) for o in offsets])
    r, w = __import__('os').pipe()
    libc.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
    pinned = libc.syscall(278, w, iov, len(offsets), 0)  # vmsplice
    if pinned < 0:
        raise OSError(ctypes.get_errno(), 'vmsplice')
bind(0)
libc.syscall(238, 0, None, 0)
while leave_mib >= 0 and free_mib(0) - 4 > leave_mib:
    take(min(16, free_mib(0) - leave_mib - 2))
sys.stdout.write('ready %d\n' % (pinned // 4096))
sys.stdout.flush()
sys.stdin.read()
'''
HOGS = {}


def hog_start(node, node_mib, pin_mib, leave_mib):
    """Start the process above; [its pid, the pages it pinned]. This
    runner's own oom_score_adj goes to -1000 first."""
    with open('/proc/self/oom_score_adj', 'w') as f:
        f.write('-1000')
    child = subprocess.Popen(
        [sys.executable, '-I', '-S', '-c', HOG, str(node), str(node_mib),
         str(pin_mib), str(leave_mib)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    line = child.stdout.readline().decode()
    if not line.startswith('ready'):
        child.kill()
        child.wait()
        raise OSError(0, 'the memory filler did not start: %r' % line)
    HOGS[child.pid] = child
    return [child.pid, int(line.split()[1])]


def hog_alive(pid):
    return HOGS[pid].poll() is None


def hog_stop(pid):
    child = HOGS.pop(pid)
    child.stdin.close()
    return child.wait(120)


# Writes ``offline`` to a block with the C library's write (Python's
# os.write would retry after EINTR); SIGUSR1 has a handler, so it
# interrupts the write instead of ending the process. Prints the write's
# result and errno.
RAW_OFFLINE = r'''
import ctypes, os, signal, sys
signal.signal(signal.SIGUSR1, lambda *a: None)
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(sys.argv[1], os.O_WRONLY)
done = libc.write(fd, b'offline', 7)
print(done, ctypes.get_errno())
'''


def offline_probe(block, wait):
    """What the kernel does with ``offline`` written to a block: whether
    the write returns within ``wait`` seconds; if not, the block's state
    meanwhile, and what the write returns once its writer gets a
    signal."""
    target = '/sys/devices/system/memory/%s/state' % cxl.check_name(block)
    started = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, '-I', '-S', '-c', RAW_OFFLINE, target],
        stdout=subprocess.PIPE)
    try:
        child.wait(wait)
        done, err = child.stdout.read().split()
        return {'blocked': False, 'result': int(done),
                'errno': errno.errorcode.get(int(err)) if int(done) < 0
                else None,
                'seconds': round(time.monotonic() - started, 1),
                'state': cxl.block_state(block)}
    except subprocess.TimeoutExpired:
        pass
    blocked_state = cxl.block_state(block)
    signalled = time.monotonic()
    child.send_signal(signal.SIGUSR1)
    out = child.stdout.read()
    child.wait(60)
    done, err = out.split()
    return {'blocked': True,
            'blocked_for': round(signalled - started, 1),
            'state_while_blocked': blocked_state,
            'result': int(done), 'errno': errno.errorcode.get(int(err)),
            'ended_after_signal': round(time.monotonic() - signalled, 2),
            'state': cxl.block_state(block)}


EXTRA = {'dax_write': dax_write, 'dax_find': dax_find,
         'numa_fill': numa_fill, 'node_memory_mib': node_memory_mib,
         'node_free_mib': node_free_mib, 'hog_start': hog_start,
         'hog_alive': hog_alive, 'hog_stop': hog_stop,
         'offline_probe': offline_probe}


def answer(request):
    try:
        name = request['call']
        function = EXTRA.get(name) or getattr(cxl, name)
        result = function(*request.get('args', ()))
        if isinstance(result, tuple):
            result = list(result)
        return {'id': request['id'], 'result': result}
    except cxl.CxlError as exc:
        return {'id': request.get('id'),
                'error': {'type': 'CxlError', 'code': exc.code.value,
                          'errno': None, 'message': exc.message}}
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
