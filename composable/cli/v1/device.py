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

from composable.cli import utils
from composable.cli.v1 import base
from composable.common import states

STATES = states.DEVICE_SETTABLE_STATES

DEVICE = base.Resource('devices', 'Device')


class CreateDevice(base.CreateCommand):
    """Register a device (GPU or PCIe device) in a pool."""

    resource = DEVICE

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

    def fields(self, parsed_args):
        fields = {'pool': parsed_args.pool, 'address': parsed_args.address}
        for name in ('kind', 'name', 'vendor_id', 'product_id', 'model',
                     'traits'):
            value = getattr(parsed_args, name)
            if value is not None:
                fields[name] = value
        return fields


class ListDevice(base.ListCommand):
    """List devices."""

    resource = DEVICE
    columns = ['uuid', 'name', 'pool_uuid', 'kind', 'model', 'address',
               'state', 'health', 'lease_uuid']
    long_columns = ['fabric_uuid', 'vendor_id', 'product_id', 'serial',
                    'health_reason', 'reachable_hosts', 'traits',
                    'pci_address', 'created_at', 'updated_at']
    filters = ('pool', 'state', 'kind', 'model')

    def add_filters(self, parser):
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


class ShowDevice(base.ShowCommand):
    """Show a device."""

    resource = DEVICE


class SetDevice(base.SetCommand):
    """Change a device, or take it out of (or back into) service."""

    resource = DEVICE

    def add_options(self, parser):
        parser.add_argument('--name', metavar='<name>', help='New name')
        parser.add_argument('--model', metavar='<model>', help='Model')
        utils.add_trait_change_options(parser)
        parser.add_argument(
            '--state', choices=STATES,
            help='available, maintenance (no new leases) or faulty')

    def changes(self, parsed_args):
        fields = {}
        for name in ('name', 'model', 'state'):
            value = getattr(parsed_args, name)
            if value is not None:
                fields[name] = value
        if parsed_args.traits or parsed_args.no_trait:
            fields['traits'] = utils.merge_traits(
                self.manager, parsed_args.device, parsed_args.traits,
                parsed_args.no_trait)
        return fields


class DeleteDevice(base.DeleteCommand):
    """Delete devices."""

    resource = DEVICE
