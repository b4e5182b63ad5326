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

from composable.cli import utils
from composable.cli.v1 import base

FABRIC = base.Resource('fabrics', 'Fabric')


class CreateFabric(base.CreateCommand):
    """Register a fabric (a composition domain: switch, rack manager)."""

    resource = FABRIC

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

    def fields(self, parsed_args):
        fields = {'name': parsed_args.name, 'driver': parsed_args.driver}
        if parsed_args.driver_info:
            fields['driver_info'] = utils.key_values(parsed_args.driver_info)
        if parsed_args.aggregate_uuid:
            fields['aggregate_uuid'] = parsed_args.aggregate_uuid
        if parsed_args.description is not None:
            fields['description'] = parsed_args.description
        return fields


class ListFabric(base.ListCommand):
    """List fabrics."""

    resource = FABRIC
    columns = ['uuid', 'name', 'driver']
    long_columns = ['driver_info', 'aggregate_uuid', 'description',
                    'created_at', 'updated_at']
    filters = ('driver',)

    def add_filters(self, parser):
        parser.add_argument('--driver', metavar='<driver>',
                            help='Only fabrics using this driver')


class ShowFabric(base.ShowCommand):
    """Show a fabric."""

    resource = FABRIC


class SetFabric(base.SetCommand):
    """Change a fabric."""

    resource = FABRIC

    def add_options(self, parser):
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

    def changes(self, parsed_args):
        fields = {}
        if parsed_args.name is not None:
            fields['name'] = parsed_args.name
        if parsed_args.driver_info or parsed_args.no_driver_info:
            info = {}
            if not parsed_args.no_driver_info:
                # Secrets come back masked; the API keeps the stored value
                # of a key sent back with the mask.
                current = self.manager.get(parsed_args.fabric)
                info.update(current.get('driver_info') or {})
            info.update(utils.key_values(parsed_args.driver_info))
            fields['driver_info'] = info
        if parsed_args.aggregate_uuid is not None:
            fields['aggregate_uuid'] = parsed_args.aggregate_uuid
        if parsed_args.description is not None:
            fields['description'] = parsed_args.description
        return fields


class DeleteFabric(base.DeleteCommand):
    """Delete fabrics (refused while hosts or pools use them)."""

    resource = FABRIC
