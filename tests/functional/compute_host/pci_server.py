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

"""The agent's PCI module kept running inside the compute host guest.

Starting Python under TCG costs seconds; a ``guest-exec`` of a busybox
shell costs tens of milliseconds. So guest_exec.PciServerRunner starts
this once (``python3 -I -S pci_server.py <directory>``, next to pci.py)
and then sends each command through a FIFO, ``<directory>/requests``:
one line ``<answer FIFO> <command> <JSON keyword arguments>``, which the
shell client writes before reading its answer FIFO. The answer is what
``pci.py <command> '<JSON>'`` would print. Commands run one at a time.

Standard library only, and only modules pci.py loads already (the guest
carries a trimmed standard library).
"""

import io
import json
import os
import sys
import time

# Seconds to wait for the client to open its answer FIFO.
ANSWER_TIMEOUT = 30


def _answer(path, text):
    deadline = time.monotonic() + ANSWER_TIMEOUT
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError:
            # ENXIO: the client has not opened it for reading yet;
            # ENOENT: it gave up. Either way, not forever.
            if time.monotonic() > deadline:
                return
            time.sleep(0.002)
    try:
        os.set_blocking(fd, True)
        data = text.encode()
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        pass
    finally:
        os.close(fd)


def _run(pci, line):
    answer_path, _, payload = line.partition(' ')
    command, _, kwargs = payload.partition(' ')
    out = io.StringIO()
    try:
        pci.main([command, kwargs] if kwargs else [command], out=out)
        text = out.getvalue()
    except BaseException as exc:  # one bad request must not end the server
        text = json.dumps({'error': pci.error_code(exc).value,
                           'message': str(exc)}) + '\n'
    _answer(answer_path, text)


def main(directory):
    sys.path.insert(0, directory)
    import pci
    requests = os.path.join(directory, 'requests')
    if not os.path.exists(requests):
        os.mkfifo(requests)
    # Read and write: the FIFO never reaches end-of-file between clients.
    fd = os.open(requests, os.O_RDWR)
    with open(os.path.join(directory, 'server.pid'), 'w') as f:
        f.write(str(os.getpid()))
    pending = b''
    while True:
        pending += os.read(fd, 65536)
        while b'\n' in pending:
            line, pending = pending.split(b'\n', 1)
            _run(pci, line.decode(errors='replace'))


if __name__ == '__main__':
    main(sys.argv[1])
