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

"""What a compute node's agent reports of its machine
(ConductorAPI.report_host_facts), kept in the host's ``properties``.

``dmi_uuid`` is the machine's SMBIOS system UUID: a Redfish service
gives the same UUID to the ComputerSystem of that machine, so the
fabric driver can match the host to its system without a name (see
doc/source/admin/fabric-redfish.rst). Only a well-formed UUID that is
not a firmware placeholder is kept; a host the database does not know
is logged and ignored.
"""

import re

from oslo_log import log as logging

from composable.common import exception
from composable.db import api as db_api

LOG = logging.getLogger(__name__)

_UUID = re.compile(r'^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
                   r'[0-9a-f]{12}$')
# Values firmware writes when it has no UUID to give.
_PLACEHOLDERS = frozenset(['00000000-0000-0000-0000-000000000000',
                           'ffffffff-ffff-ffff-ffff-ffffffffffff',
                           '03000200-0400-0500-0006-000700080009'])


def clean_uuid(value):
    """A DMI UUID, lower case, or None when ``value`` is not one."""
    if not isinstance(value, str):
        return None
    value = value.strip().lower()
    if not _UUID.match(value) or value in _PLACEHOLDERS:
        return None
    return value


def record(context, host_name, facts):
    """Store the facts ``host_name`` reported; True when something
    changed."""
    facts = facts if isinstance(facts, dict) else {}
    try:
        host = db_api.host_get(context, host_name)
    except exception.NotFound:
        LOG.info('Host %s reported its machine facts but is not a '
                 'registered host; ignored', host_name)
        return False
    reported = clean_uuid(facts.get('dmi_uuid'))
    properties = dict(host.properties or {})
    # Nothing usable reported keeps what is there (an operator may have
    # set it for a machine whose firmware gives none).
    if reported is None or properties.get('dmi_uuid') == reported:
        return False
    properties['dmi_uuid'] = reported
    db_api.host_update(context, host.uuid, {'properties': properties})
    LOG.info('Host %(host)s reports the DMI UUID %(uuid)s',
             {'host': host.name, 'uuid': reported})
    return True


def fabric_row_with_hosts(context, fabric):
    """``fabric`` (a row object) as a dict for its driver, with the hosts
    on it and their facts, so that a driver can name the host of a
    system it knows by the host's reported DMI UUID."""
    row = fabric.as_dict()
    row['hosts'] = [
        {'name': h.name, 'uuid': h.uuid,
         'properties': dict(h.properties or {})}
        for h in db_api.host_list(context,
                                  filters={'fabric_id': fabric.id})]
    return row
