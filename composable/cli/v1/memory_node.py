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

"""``openstack composable memory node ...``"""

from composable.cli import utils
from composable.cli.v1 import base

TRANSPORTS = ('iser', 'tcp')

MEMORY_NODE = base.Resource('memory_nodes', 'Memory node', dest='node')


class CreateMemoryNode(base.CreateCommand):
    """Register a memory node: a server lending its memory to a pool."""

    resource = MEMORY_NODE

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('name', metavar='<name>',
                            help='Node name (also its agent\'s RPC server)')
        parser.add_argument('--pool', metavar='<pool>', required=True,
                            help='Memory pool of the node (name or UUID)')
        parser.add_argument(
            '--capacity', metavar='<size>', required=True,
            type=utils.size_type(),
            help='Memory the node lends (%s)' % utils.SIZE_HELP)
        parser.add_argument(
            '--reserved', metavar='<size>',
            type=utils.size_type(allow_zero=True),
            help='Memory kept back on the node (%s)' % utils.SIZE_HELP)
        parser.add_argument('--exporter', metavar='<exporter>',
                            help='Exporter driver (default: noop)')
        parser.add_argument('--portal', metavar='<ip:port>',
                            help='Target portal the hosts connect to')
        parser.add_argument('--transport', choices=TRANSPORTS,
                            help='Transport: iser or tcp (default tcp)')
        parser.add_argument(
            '--disable', action='store_true', default=False,
            help='Register the node disabled (no new allocations)')
        return parser

    def fields(self, parsed_args):
        fields = {'name': parsed_args.name, 'pool': parsed_args.pool,
                  'capacity_mb': parsed_args.capacity}
        if parsed_args.reserved is not None:
            fields['reserved_mb'] = parsed_args.reserved
        if parsed_args.exporter is not None:
            fields['exporter'] = parsed_args.exporter
        if parsed_args.portal is not None:
            fields['portal'] = parsed_args.portal
        if parsed_args.transport is not None:
            fields['transport'] = parsed_args.transport
        if parsed_args.disable:
            fields['enabled'] = False
        return fields


class ListMemoryNode(base.ListCommand):
    """List memory nodes."""

    resource = MEMORY_NODE
    columns = ['uuid', 'name', 'pool_uuid', 'capacity_mb', 'reserved_mb',
               'allocated_mb', 'enabled']
    long_columns = ['fabric_uuid', 'exporter', 'portal', 'transport',
                    'created_at', 'updated_at']
    filters = ('pool',)

    def add_filters(self, parser):
        parser.add_argument('--pool', metavar='<pool>',
                            help='Only nodes of this pool (name or UUID)')


class ShowMemoryNode(base.ShowCommand):
    """Show a memory node."""

    resource = MEMORY_NODE


class SetMemoryNode(base.SetCommand):
    """Change a memory node."""

    resource = MEMORY_NODE

    def add_options(self, parser):
        parser.add_argument(
            '--capacity', metavar='<size>', type=utils.size_type(),
            help='Memory the node lends (%s)' % utils.SIZE_HELP)
        parser.add_argument(
            '--reserved', metavar='<size>',
            type=utils.size_type(allow_zero=True),
            help='Memory kept back on the node (%s)' % utils.SIZE_HELP)
        parser.add_argument('--portal', metavar='<ip:port>',
                            help='Target portal the hosts connect to')
        parser.add_argument('--transport', choices=TRANSPORTS,
                            help='Transport: iser or tcp')
        enable = parser.add_mutually_exclusive_group()
        enable.add_argument('--enable', dest='enabled', action='store_true',
                            default=None,
                            help='Allow new allocations on the node')
        enable.add_argument('--disable', dest='enabled',
                            action='store_false',
                            help='Stop new allocations on the node')

    def changes(self, parsed_args):
        fields = {}
        if parsed_args.capacity is not None:
            fields['capacity_mb'] = parsed_args.capacity
        if parsed_args.reserved is not None:
            fields['reserved_mb'] = parsed_args.reserved
        if parsed_args.portal is not None:
            fields['portal'] = parsed_args.portal
        if parsed_args.transport is not None:
            fields['transport'] = parsed_args.transport
        if parsed_args.enabled is not None:
            fields['enabled'] = parsed_args.enabled
        return fields


class DeleteMemoryNode(base.DeleteCommand):
    """Delete memory nodes."""

    resource = MEMORY_NODE
