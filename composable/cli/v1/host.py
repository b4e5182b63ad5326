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

"""``openstack composable host ...``"""

from composable.cli import utils
from composable.cli.v1 import base

HOST = base.Resource('hosts', 'Host')


def _add_property_options(parser):
    parser.add_argument(
        '--initiator-iqn', metavar='<iqn>',
        help='iSCSI initiator IQN of the host (for memory leases)')
    parser.add_argument(
        '--partition-id', metavar='<partition-id>',
        help='Identifier of the host on its fabric')
    parser.add_argument(
        '--property', metavar='<key=value>', dest='properties',
        action='append', type=utils.parse_key_value,
        help='Property to add or change (repeat for several)')


class CreateHost(base.CreateCommand):
    """Register a host (a compute node attached to a fabric)."""

    resource = HOST

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('name', metavar='<name>',
                            help='Host name (as Nova knows the compute node)')
        parser.add_argument('--fabric', metavar='<fabric>', required=True,
                            help='Fabric of the host (name or UUID)')
        _add_property_options(parser)
        return parser

    def fields(self, parsed_args):
        fields = {'name': parsed_args.name, 'fabric': parsed_args.fabric}
        if parsed_args.initiator_iqn is not None:
            fields['initiator_iqn'] = parsed_args.initiator_iqn
        if parsed_args.partition_id is not None:
            fields['partition_id'] = parsed_args.partition_id
        if parsed_args.properties:
            fields['properties'] = utils.key_values(parsed_args.properties)
        return fields


class ListHost(base.ListCommand):
    """List hosts."""

    resource = HOST
    columns = ['uuid', 'name', 'fabric_uuid', 'initiator_iqn']
    long_columns = ['partition_id', 'properties', 'created_at',
                    'updated_at']
    filters = ('fabric',)

    def add_filters(self, parser):
        parser.add_argument('--fabric', metavar='<fabric>',
                            help='Only hosts on this fabric (name or UUID)')


class ShowHost(base.ShowCommand):
    """Show a host."""

    resource = HOST


class SetHost(base.SetCommand):
    """Change a host."""

    resource = HOST

    def add_options(self, parser):
        _add_property_options(parser)
        parser.add_argument(
            '--no-property', action='store_true', default=False,
            help='Remove every property (then add those of --property)')

    def changes(self, parsed_args):
        fields = {}
        if parsed_args.initiator_iqn is not None:
            fields['initiator_iqn'] = parsed_args.initiator_iqn
        if parsed_args.partition_id is not None:
            fields['partition_id'] = parsed_args.partition_id
        if parsed_args.properties or parsed_args.no_property:
            properties = {}
            if not parsed_args.no_property:
                current = self.manager.get(parsed_args.host)
                properties.update(current.get('properties') or {})
            properties.update(utils.key_values(parsed_args.properties))
            fields['properties'] = properties
        return fields


class DeleteHost(base.DeleteCommand):
    """Delete hosts."""

    resource = HOST
