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

import logging

from osc_lib.command import command

from composable.cli import utils


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


class CreateHost(command.ShowOne):
    """Register a host (a compute node attached to a fabric)."""

    log = logging.getLogger(__name__ + '.CreateHost')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('name', metavar='<name>',
                            help='Host name (as Nova knows the compute node)')
        parser.add_argument('--fabric', metavar='<fabric>', required=True,
                            help='Fabric of the host (name or UUID)')
        _add_property_options(parser)
        return parser

    def take_action(self, parsed_args):
        client = self.app.client_manager.composable
        fields = {'name': parsed_args.name, 'fabric': parsed_args.fabric}
        if parsed_args.initiator_iqn is not None:
            fields['initiator_iqn'] = parsed_args.initiator_iqn
        if parsed_args.partition_id is not None:
            fields['partition_id'] = parsed_args.partition_id
        if parsed_args.properties:
            fields['properties'] = utils.key_values(parsed_args.properties)
        return utils.show(client.hosts.create(**fields))


class ListHost(command.Lister):
    """List hosts."""

    log = logging.getLogger(__name__ + '.ListHost')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('--fabric', metavar='<fabric>',
                            help='Only hosts on this fabric (name or UUID)')
        parser.add_argument('--long', action='store_true', default=False,
                            help='Show more fields')
        utils.add_list_options(parser)
        return parser

    def take_action(self, parsed_args):
        client = self.app.client_manager.composable
        columns = ['uuid', 'name', 'fabric_uuid', 'initiator_iqn']
        if parsed_args.long:
            columns += ['partition_id', 'properties', 'created_at',
                        'updated_at']
        items = client.hosts.list(limit=parsed_args.limit,
                                  fabric=parsed_args.fabric,
                                  **utils.list_params(parsed_args))
        return utils.table(items, columns)


class ShowHost(command.ShowOne):
    """Show a host."""

    log = logging.getLogger(__name__ + '.ShowHost')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('host', metavar='<host>',
                            help='Host (name or UUID)')
        return parser

    def take_action(self, parsed_args):
        client = self.app.client_manager.composable
        return utils.show(client.hosts.get(parsed_args.host))


class SetHost(command.ShowOne):
    """Change a host."""

    log = logging.getLogger(__name__ + '.SetHost')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('host', metavar='<host>',
                            help='Host (name or UUID)')
        _add_property_options(parser)
        parser.add_argument(
            '--no-property', action='store_true', default=False,
            help='Remove every property (then add those of --property)')
        return parser

    def take_action(self, parsed_args):
        client = self.app.client_manager.composable
        fields = {}
        if parsed_args.initiator_iqn is not None:
            fields['initiator_iqn'] = parsed_args.initiator_iqn
        if parsed_args.partition_id is not None:
            fields['partition_id'] = parsed_args.partition_id
        if parsed_args.properties or parsed_args.no_property:
            properties = {}
            if not parsed_args.no_property:
                current = client.hosts.get(parsed_args.host)
                properties.update(current.get('properties') or {})
            properties.update(utils.key_values(parsed_args.properties))
            fields['properties'] = properties
        if not fields:
            return utils.show(client.hosts.get(parsed_args.host))
        return utils.show(client.hosts.update(parsed_args.host, **fields))


class DeleteHost(command.Command):
    """Delete hosts."""

    log = logging.getLogger(__name__ + '.DeleteHost')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('hosts', metavar='<host>', nargs='+',
                            help='Host(s) to delete (name or UUID)')
        return parser

    def take_action(self, parsed_args):
        client = self.app.client_manager.composable
        utils.delete_all(self.log, parsed_args.hosts, client.hosts.delete,
                         'host')
