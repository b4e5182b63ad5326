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

"""The line protocol between the libvirt hook and the agent's hook server.

One JSON document per line each way, UTF-8: the hook sends a request
object, the agent answers with a reply object ({"v", "ok", ...}). Both
ends use this module; it imports only the standard library, since the
hook runs it with ``python3 -I -S`` (see composable.hooks.libvirt).
"""

import json

PROTOCOL = 1

_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(',', ':'))


def encode(value):
    """JSON text of ``value`` (dicts, lists, str, int, float, bool,
    None), ASCII only."""
    return _ENCODER.encode(value)


def decode(text):
    """The value of one JSON document. ValueError when it is not JSON."""
    return json.loads(text)


def encode_line(value):
    """``value`` as one line on the wire (bytes, newline included)."""
    return encode(value).encode('ascii') + b'\n'


def decode_line(line):
    """The value of one line read from the wire (bytes). ValueError when
    it is not UTF-8 JSON."""
    return decode(line.decode('utf-8'))
