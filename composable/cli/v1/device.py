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

"""``openstack composable device ...``"""

import logging

from osc_lib.command import command

from composable.cli import utils

STATES = ('available', 'maintenance', 'faulty')


class CreateDevice(command.ShowOne):
    """Register a device (GPU or PCIe device) in a pool."""

    log = logging.getLogger(__name__ + '.CreateDevice')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('--pool', metavar='<pool>', required=True,
                            help='GPU or PCI pool of the device (name or '
                                 'UUID)')
        parser.add_argument('--address', metavar='<address>', required=True,
                            help='Address of the device on its fabric')
        parser.add_argument(
            '--kind', metavar='<kind>',
            help='Device kind (default: gpu for gpu pools, the lower-case '
                 'device class for pci pools)')
        parser.add_argument('--name', metavar='<name>', help='Device name')
        parser.add_argument('--vendor-id', metavar='<vendor-id>',
                            help='PCI vendor ID (4 hex digits)')
        parser.add_argument('--product-id', metavar='<product-id>',
                            help='PCI product ID (4 hex digits)')
        parser.add_argument('--model', metavar='<model>',
                            help='Model, e.g. A100')
        parser.add_argument(
            '--trait', metavar='<trait>', dest='traits', action='append',
            help='Trait of the device (repeat for several)')
        return parser

    def take_action(self, parsed_args):
        client = self.app.client_manager.composable
        fields = {'pool': parsed_args.pool, 'address': parsed_args.address}
        for name in ('kind', 'name', 'vendor_id', 'product_id', 'model',
                     'traits'):
            value = getattr(parsed_args, name)
            if value is not None:
                fields[name] = value
        return utils.show(client.devices.create(**fields))


class ListDevice(command.Lister):
    """List devices."""

    log = logging.getLogger(__name__ + '.ListDevice')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('--pool', metavar='<pool>',
                            help='Only devices of this pool (name or UUID)')
        parser.add_argument(
            '--state', metavar='<state>',
            help='Only devices in this state (available, maintenance, '
                 'faulty, reserved or attached)')
        parser.add_argument('--kind', metavar='<kind>',
                            help='Only devices of this kind')
        parser.add_argument('--model', metavar='<model>',
                            help='Only devices of this model')
        parser.add_argument('--long', action='store_true', default=False,
                            help='Show more fields')
        utils.add_list_options(parser)
        return parser

    def take_action(self, parsed_args):
        client = self.app.client_manager.composable
        columns = ['uuid', 'name', 'pool_uuid', 'kind', 'model', 'address',
                   'state', 'lease_uuid']
        if parsed_args.long:
            columns += ['fabric_uuid', 'vendor_id', 'product_id', 'traits',
                        'pci_address', 'created_at', 'updated_at']
        items = client.devices.list(limit=parsed_args.limit,
                                    pool=parsed_args.pool,
                                    state=parsed_args.state,
                                    kind=parsed_args.kind,
                                    model=parsed_args.model,
                                    **utils.list_params(parsed_args))
        return utils.table(items, columns)


class ShowDevice(command.ShowOne):
    """Show a device."""

    log = logging.getLogger(__name__ + '.ShowDevice')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('device', metavar='<device>',
                            help='Device (name or UUID)')
        return parser

    def take_action(self, parsed_args):
        client = self.app.client_manager.composable
        return utils.show(client.devices.get(parsed_args.device))


class SetDevice(command.ShowOne):
    """Change a device, or take it out of (or back into) service."""

    log = logging.getLogger(__name__ + '.SetDevice')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('device', metavar='<device>',
                            help='Device (name or UUID)')
        parser.add_argument('--name', metavar='<name>', help='New name')
        parser.add_argument('--model', metavar='<model>', help='Model')
        parser.add_argument(
            '--trait', metavar='<trait>', dest='traits', action='append',
            help='Trait to add (repeat for several)')
        parser.add_argument(
            '--no-trait', action='store_true', default=False,
            help='Remove every trait (then add those of --trait)')
        parser.add_argument(
            '--state', choices=STATES,
            help='available, maintenance (no new leases) or faulty')
        return parser

    def take_action(self, parsed_args):
        client = self.app.client_manager.composable
        fields = {}
        for name in ('name', 'model', 'state'):
            value = getattr(parsed_args, name)
            if value is not None:
                fields[name] = value
        if parsed_args.traits or parsed_args.no_trait:
            fields['traits'] = utils.merge_traits(
                client.devices, parsed_args.device, parsed_args.traits,
                parsed_args.no_trait)
        if not fields:
            return utils.show(client.devices.get(parsed_args.device))
        return utils.show(client.devices.update(parsed_args.device,
                                                **fields))


class DeleteDevice(command.Command):
    """Delete devices."""

    log = logging.getLogger(__name__ + '.DeleteDevice')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('devices', metavar='<device>', nargs='+',
                            help='Device(s) to delete (name or UUID)')
        return parser

    def take_action(self, parsed_args):
        client = self.app.client_manager.composable
        utils.delete_all(self.log, parsed_args.devices,
                         client.devices.delete, 'device')
