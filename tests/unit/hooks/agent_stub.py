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

"""A stand-in for the agent's hook socket: a real unix socket server in a
test's directory that records the JSON lines it gets and answers what the
test tells it to (or nothing, to make the hook time out)."""

import json
import os
import socket
import threading


class StubAgent(object):

    def __init__(self, path, reply=None, silent=False):
        self.path = str(path)
        self.reply = reply if reply is not None else {'v': 1, 'ok': True}
        self.silent = silent
        self.requests = []
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(self.path)
        self._sock.listen(8)
        self._sock.settimeout(0.2)
        self._held = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                data = b''
                while not data.endswith(b'\n'):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                if data:
                    self.requests.append(json.loads(data))
                if self.silent:
                    # Keep the connection open, say nothing.
                    self._stop.wait(30)
                    continue
                conn.sendall(json.dumps(self.reply).encode() + b'\n')

    def close(self):
        self._stop.set()
        self._sock.close()
        self._thread.join(5)
        if os.path.exists(self.path):
            os.unlink(self.path)
