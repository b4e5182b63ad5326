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

"""How often the redfish connections read the service root.

One operation of the redfish driver reads the root once before the login
(to see how to log in) and once after it, and takes every link it
follows (Systems, CompositionService, Fabrics, Chassis) from that one
authenticated read.
"""

from composable.fabric.redfish import connection


def record(monkeypatch):
    """Every GET of the service root the redfish connections make from
    now on, as (connection id, authenticated), in order. The reads go to
    the service as they would; this only writes them down."""
    seen = []
    real_get = connection.Connection.get

    def get(self, path, authenticated=True):
        if path.rstrip('/') == connection.ROOT.rstrip('/'):
            seen.append((id(self), authenticated))
        return real_get(self, path, authenticated=authenticated)

    monkeypatch.setattr(connection.Connection, 'get', get)
    return seen


def assert_once_per_connection(seen):
    """Each connection read the root once unauthenticated, first, and at
    most once authenticated, however many of its links it followed."""
    assert seen, 'no connection read the service root'
    for conn in {c for c, _ in seen}:
        reads = [auth for c, auth in seen if c == conn]
        assert reads[0] is False, seen
        assert reads.count(False) == 1, seen
        assert reads.count(True) <= 1, seen
