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

"""API microversions of composable.

Clients ask for a version with ``OpenStack-API-Version: composable X.Y``.
A request without the header gets the minimum version, so that a client
written against 1.0 keeps working whatever the server learns later;
``latest`` gets the maximum.

Version history (add one line per new version, and bump MAX_VERSION):

=======  ==============================================================
Version  Change
=======  ==============================================================
1.0      Initial version: fabrics, hosts, memory nodes, pools, devices,
         leases (create, bind, unbind, delete) and lease actions.
1.1      GET /v1/leases/{lease}/usage: the usage history of a memory
         lease, as its compute agent reports it.
1.2      Elastic memory leases: ``elastic`` (min_mb, max_mb,
         observation_window, prediction_window, headroom) at lease
         creation, shown on leases.
1.3      Pools: a pci pool may be made of the SR-IOV virtual functions
         of one physical function of one host (``sriov`` on create,
         shown on every pool).
1.4      Devices show what their fabric reports of them: ``serial``,
         ``health`` (ok, warning, critical, unknown), ``health_reason``
         and ``reachable_hosts`` (the hosts the fabric can connect the
         device to; null for every host of its fabric).
1.5      Pools: ``medium`` of a memory pool, ``network`` (the default)
         or ``cxl`` (CXL memory devices, leased in whole chunks, bound
         to a host as a NUMA node); on create, shown on every pool.
1.6      Leases: ``attach_mode`` ``virtio-mem`` (create and bind), for
         leases of a CXL pool bound to a server: the memory is onlined
         on the server's host as a NUMA node and plugged into the guest
         by a virtio-mem device pinned to that node.
1.7      Leases: ``elastic`` on a CXL pool, for a lease created with
         ``attach_mode`` ``virtio-mem`` on a fabric whose CXL back end
         is ``local``: it grows and shrinks by whole chunks plugged into
         and out of its guest's virtio-mem device.
=======  ==============================================================
"""

import microversion_parse

SERVICE_TYPE = 'composable'
HEADER = 'OpenStack-API-Version'
ENVIRON_KEY = 'composable.microversion'

# Every version the server accepts, oldest first.
VERSIONS = (
    '1.0',
    '1.1',
    '1.2',
    '1.3',
    '1.4',
    '1.5',
    '1.6',
    '1.7',
)

MIN_VERSION_STRING = VERSIONS[0]
MAX_VERSION_STRING = VERSIONS[-1]


class MicroversionError(Exception):
    """Raised for a malformed header (400) or an unknown version (406)."""

    def __init__(self, message, code):
        self.message = message
        self.code = code
        super().__init__(message)


def parse_version_string(value):
    return microversion_parse.parse_version_string(value)


MIN_VERSION = parse_version_string(MIN_VERSION_STRING)
MAX_VERSION = parse_version_string(MAX_VERSION_STRING)


def extract_version(headers):
    """The microversion a request asks for, as a comparable Version."""
    try:
        requested = microversion_parse.get_version(
            headers, service_type=SERVICE_TYPE)
    except ValueError:
        requested = None
    if requested is not None and requested != 'latest':
        try:
            parse_version_string(requested)
        except TypeError:
            raise MicroversionError(
                'Invalid %s header value %r: expected "%s X.Y" or '
                '"%s latest".' % (HEADER, requested, SERVICE_TYPE,
                                  SERVICE_TYPE), 400)
    try:
        return microversion_parse.extract_version(headers, SERVICE_TYPE,
                                                  VERSIONS)
    except ValueError:
        raise MicroversionError(
            'Version %s is not supported by the API. Minimum is %s and '
            'maximum is %s.' % (requested, MIN_VERSION_STRING,
                                MAX_VERSION_STRING), 406)


def header_value(version):
    return '%s %s' % (SERVICE_TYPE, version)


def select(request_version, choices):
    """Pick the entry of ``choices`` that applies to ``request_version``.

    ``choices`` maps a minimum version string to a value, for example JSON
    schemas: ``{'1.0': CREATE, '1.3': CREATE_1_3}``. The entry with the
    highest minimum version not above the request's version wins, so a
    change in version 1.3 needs only a new entry here.
    """
    best = None
    best_version = None
    for min_version, value in choices.items():
        version = parse_version_string(min_version)
        if version <= tuple(request_version) and (
                best_version is None or version > best_version):
            best, best_version = value, version
    if best_version is None:
        raise KeyError('nothing for version %s' % (request_version,))
    return best
