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

"""``openstack composable pool ...``"""

from composable.cli import utils
from composable.cli.v1 import base
from composable.common import resource_classes

KINDS = ('memory', 'gpu', 'pci')

POOL = base.Resource('pools', 'Pool')


class CreatePool(base.CreateCommand):
    """Create a pool: one kind of resource on one fabric."""

    resource = POOL

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('name', metavar='<name>', help='Pool name')
        parser.add_argument('--kind', choices=KINDS, required=True,
                            help='What the pool lends: memory, gpu or pci')
        parser.add_argument('--fabric', metavar='<fabric>', required=True,
                            help='Fabric of the pool (name or UUID)')
        parser.add_argument(
            '--device-class', metavar='<class>',
            help='Device class of a pci pool, e.g. NVME or FPGA (required '
                 'for --kind pci; gives the resource class '
                 '%s<CLASS>)' % resource_classes.PCI_PREFIX)
        parser.add_argument(
            '--trait', metavar='<trait>', dest='traits', action='append',
            help='Trait of the pool (standard os-traits name or CUSTOM_*; '
                 'repeat for several)')
        parser.add_argument(
            '--reserved', metavar='<amount>', type=utils.non_negative_int,
            help='Amount kept back from leases (MiB for memory pools, '
                 'devices otherwise)')
        parser.add_argument(
            '--step-size', metavar='<size>', dest='step_size',
            type=utils.size_type(),
            help='Memory pools: leases are multiples of this size (%s; '
                 'default [allocator]memory_extent_mb)' % utils.SIZE_HELP)
        parser.add_argument('--description', metavar='<description>',
                            help='Description')
        return parser

    def fields(self, parsed_args):
        fields = {'name': parsed_args.name, 'kind': parsed_args.kind,
                  'fabric': parsed_args.fabric}
        if parsed_args.device_class is not None:
            fields['device_class'] = parsed_args.device_class
        if parsed_args.traits:
            fields['traits'] = parsed_args.traits
        if parsed_args.reserved is not None:
            fields['reserved'] = parsed_args.reserved
        if parsed_args.step_size is not None:
            fields['step_size'] = parsed_args.step_size
        if parsed_args.description is not None:
            fields['description'] = parsed_args.description
        return fields


class ListPool(base.ListCommand):
    """List pools with their capacity."""

    resource = POOL
    columns = ['uuid', 'name', 'kind', 'resource_class', 'total',
               'reserved', 'used', 'free']
    long_columns = ['fabric_uuid', 'traits', 'step_size', 'provider_uuid',
                    'description']
    filters = ('kind', 'fabric')

    def add_filters(self, parser):
        parser.add_argument('--kind', choices=KINDS,
                            help='Only pools of this kind')
        parser.add_argument('--fabric', metavar='<fabric>',
                            help='Only pools on this fabric (name or UUID)')


class ShowPool(base.ShowCommand):
    """Show a pool."""

    resource = POOL


class SetPool(base.SetCommand):
    """Change a pool."""

    resource = POOL

    def add_options(self, parser):
        parser.add_argument('--name', metavar='<name>', help='New name')
        parser.add_argument(
            '--reserved', metavar='<amount>', type=utils.non_negative_int,
            help='Amount kept back from leases (MiB for memory pools, '
                 'devices otherwise)')
        utils.add_trait_change_options(parser)
        parser.add_argument('--description', metavar='<description>',
                            help='Description')

    def changes(self, parsed_args):
        fields = {}
        if parsed_args.name is not None:
            fields['name'] = parsed_args.name
        if parsed_args.reserved is not None:
            fields['reserved'] = parsed_args.reserved
        if parsed_args.description is not None:
            fields['description'] = parsed_args.description
        if parsed_args.traits or parsed_args.no_trait:
            fields['traits'] = utils.merge_traits(
                self.manager, parsed_args.pool, parsed_args.traits,
                parsed_args.no_trait)
        return fields


class DeletePool(base.DeleteCommand):
    """Delete pools (refused while they have nodes, devices or leases)."""

    resource = POOL
