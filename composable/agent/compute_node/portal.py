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

"""iSCSI portals as memory nodes give them: 'host', 'host:port',
'[v6]', '[v6]:port' or a bare IPv6 address."""

from composable.common import exception

DEFAULT_ISCSI_PORT = 3260


def parse_portal(portal):
    """(host, port) of ``portal``; Invalid when it names none."""
    if not portal:
        raise exception.Invalid(reason='the extent has no portal')
    portal = portal.strip()
    if portal.startswith('['):
        host, _, rest = portal[1:].partition(']')
        port = rest[1:] if rest.startswith(':') else ''
    elif portal.count(':') == 1:
        host, port = portal.split(':')
    else:  # a name, an IPv4 address or a bare IPv6 address
        host, port = portal, ''
    try:
        port = int(port) if port else DEFAULT_ISCSI_PORT
    except ValueError:
        raise exception.Invalid(reason='bad iSCSI portal %r' % portal)
    if not host:
        raise exception.Invalid(reason='bad iSCSI portal %r' % portal)
    return host, port


def format_portal(portal):
    """``portal`` as iscsiadm takes it: 'host:port' ('[v6]:port')."""
    host, port = parse_portal(portal)
    if ':' in host:
        host = '[%s]' % host
    return '%s:%s' % (host, port)
