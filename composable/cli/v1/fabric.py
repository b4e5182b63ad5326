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

"""``openstack composable fabric ...``"""

import logging

from osc_lib.command import command

from composable.cli import utils


class CreateFabric(command.ShowOne):
    """Register a fabric (a composition domain: switch, rack manager)."""

    log = logging.getLogger(__name__ + '.CreateFabric')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('name', metavar='<name>', help='Fabric name')
        parser.add_argument(
            '--driver', metavar='<driver>', required=True,
            help='Fabric driver (one of [fabric]enabled_drivers)')
        parser.add_argument(
            '--driver-info', metavar='<key=value>', dest='driver_info',
            action='append', type=utils.parse_key_value,
            help='Driver setting (repeat for several)')
        parser.add_argument(
            '--aggregate-uuid', metavar='<uuid>',
            help='Nova host aggregate of the hosts on this fabric')
        parser.add_argument('--description', metavar='<description>',
                            help='Description')
        return parser

    def take_action(self, parsed_args):
        client = self.app.client_manager.composable
        fields = {'name': parsed_args.name, 'driver': parsed_args.driver}
        if parsed_args.driver_info:
            fields['driver_info'] = utils.key_values(parsed_args.driver_info)
        if parsed_args.aggregate_uuid:
            fields['aggregate_uuid'] = parsed_args.aggregate_uuid
        if parsed_args.description is not None:
            fields['description'] = parsed_args.description
        return utils.show(client.fabrics.create(**fields))


class ListFabric(command.Lister):
    """List fabrics."""

    log = logging.getLogger(__name__ + '.ListFabric')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('--driver', metavar='<driver>',
                            help='Only fabrics using this driver')
        parser.add_argument('--long', action='store_true', default=False,
                            help='Show more fields')
        utils.add_list_options(parser)
        return parser

    def take_action(self, parsed_args):
        client = self.app.client_manager.composable
        columns = ['uuid', 'name', 'driver']
        if parsed_args.long:
            columns += ['driver_info', 'aggregate_uuid', 'description',
                        'created_at', 'updated_at']
        items = client.fabrics.list(limit=parsed_args.limit,
                                    driver=parsed_args.driver,
                                    **utils.list_params(parsed_args))
        return utils.table(items, columns)


class ShowFabric(command.ShowOne):
    """Show a fabric."""

    log = logging.getLogger(__name__ + '.ShowFabric')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('fabric', metavar='<fabric>',
                            help='Fabric (name or UUID)')
        return parser

    def take_action(self, parsed_args):
        client = self.app.client_manager.composable
        return utils.show(client.fabrics.get(parsed_args.fabric))


class SetFabric(command.ShowOne):
    """Change a fabric."""

    log = logging.getLogger(__name__ + '.SetFabric')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('fabric', metavar='<fabric>',
                            help='Fabric (name or UUID)')
        parser.add_argument('--name', metavar='<name>', help='New name')
        parser.add_argument(
            '--driver-info', metavar='<key=value>', dest='driver_info',
            action='append', type=utils.parse_key_value,
            help='Driver setting to add or change (repeat for several); '
                 'the other settings, secrets included, are kept')
        parser.add_argument(
            '--no-driver-info', action='store_true', default=False,
            help='Remove every driver setting (then add those of '
                 '--driver-info)')
        parser.add_argument('--aggregate-uuid', metavar='<uuid>',
                            help='Nova host aggregate')
        parser.add_argument('--description', metavar='<description>',
                            help='Description')
        return parser

    def take_action(self, parsed_args):
        client = self.app.client_manager.composable
        fields = {}
        if parsed_args.name is not None:
            fields['name'] = parsed_args.name
        if parsed_args.driver_info or parsed_args.no_driver_info:
            info = {}
            if not parsed_args.no_driver_info:
                # Secrets come back masked; the API keeps the stored value
                # of a key sent back with the mask.
                current = client.fabrics.get(parsed_args.fabric)
                info.update(current.get('driver_info') or {})
            info.update(utils.key_values(parsed_args.driver_info))
            fields['driver_info'] = info
        if parsed_args.aggregate_uuid is not None:
            fields['aggregate_uuid'] = parsed_args.aggregate_uuid
        if parsed_args.description is not None:
            fields['description'] = parsed_args.description
        if not fields:
            return utils.show(client.fabrics.get(parsed_args.fabric))
        return utils.show(client.fabrics.update(parsed_args.fabric,
                                                **fields))


class DeleteFabric(command.Command):
    """Delete fabrics (refused while hosts or pools use them)."""

    log = logging.getLogger(__name__ + '.DeleteFabric')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('fabrics', metavar='<fabric>', nargs='+',
                            help='Fabric(s) to delete (name or UUID)')
        return parser

    def take_action(self, parsed_args):
        client = self.app.client_manager.composable
        utils.delete_all(self.log, parsed_args.fabrics,
                         client.fabrics.delete, 'fabric')
