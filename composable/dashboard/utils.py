#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""What the plugin's tables share."""

import sys

from django.utils.translation import gettext_lazy as _
from horizon import exceptions
from horizon import messages

from composable.dashboard.api import composable as api


def call_reporting_failure(table, request, obj_id, call, message):
    """Call the API for a table's batch action; on failure, say why.

    Horizon's own failure message names the object only: this one also
    gives the API's reason (``message`` has ``%(name)s`` and
    ``%(reason)s``), and replaces Horizon's, the error being raised as
    already handled.
    """
    try:
        call(request, obj_id)
    except api.ComposableAPIError as exc:
        datum = table.get_object_by_id(obj_id)
        messages.error(request, message % {
            'name': table.get_object_display(datum) if datum else obj_id,
            'reason': exc.message})
        raise exceptions.HandledException(sys.exc_info())


def host_choices(request, first):
    """The inventory's hosts (which only administrators may read) as the
    choices of a form field, by name, after ``first`` (the empty
    choice); ``first`` alone, with an error message saying why, when the
    API does not list them."""
    choices = [('', first)]
    try:
        hosts = api.host_list(request)
    except api.ComposableAPIError:
        exceptions.handle(request, _('Unable to retrieve the hosts.'))
        return choices
    return choices + [(host.name, host.name)
                      for host in sorted(hosts, key=lambda h: h.name)]
