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

import logging

from osc_lib.command import command

from composable.cli import utils

TRANSPORTS = ('iser', 'tcp')


class CreateMemoryNode(command.ShowOne):
    """Register a memory node: a server lending its memory to a pool."""

    log = logging.getLogger(__name__ + '.CreateMemoryNode')

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

    def take_action(self, parsed_args):
        client = self.app.client_manager.composable
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
        return utils.show(client.memory_nodes.create(**fields))


class ListMemoryNode(command.Lister):
    """List memory nodes."""

    log = logging.getLogger(__name__ + '.ListMemoryNode')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('--pool', metavar='<pool>',
                            help='Only nodes of this pool (name or UUID)')
        parser.add_argument('--long', action='store_true', default=False,
                            help='Show more fields')
        utils.add_list_options(parser)
        return parser

    def take_action(self, parsed_args):
        client = self.app.client_manager.composable
        columns = ['uuid', 'name', 'pool_uuid', 'capacity_mb',
                   'reserved_mb', 'allocated_mb', 'enabled']
        if parsed_args.long:
            columns += ['fabric_uuid', 'exporter', 'portal', 'transport',
                        'created_at', 'updated_at']
        items = client.memory_nodes.list(limit=parsed_args.limit,
                                         pool=parsed_args.pool,
                                         **utils.list_params(parsed_args))
        return utils.table(items, columns)


class ShowMemoryNode(command.ShowOne):
    """Show a memory node."""

    log = logging.getLogger(__name__ + '.ShowMemoryNode')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('node', metavar='<memory-node>',
                            help='Memory node (name or UUID)')
        return parser

    def take_action(self, parsed_args):
        client = self.app.client_manager.composable
        return utils.show(client.memory_nodes.get(parsed_args.node))


class SetMemoryNode(command.ShowOne):
    """Change a memory node."""

    log = logging.getLogger(__name__ + '.SetMemoryNode')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('node', metavar='<memory-node>',
                            help='Memory node (name or UUID)')
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
        return parser

    def take_action(self, parsed_args):
        client = self.app.client_manager.composable
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
        if not fields:
            return utils.show(client.memory_nodes.get(parsed_args.node))
        return utils.show(client.memory_nodes.update(parsed_args.node,
                                                     **fields))


class DeleteMemoryNode(command.Command):
    """Delete memory nodes."""

    log = logging.getLogger(__name__ + '.DeleteMemoryNode')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('nodes', metavar='<memory-node>', nargs='+',
                            help='Memory node(s) to delete (name or UUID)')
        return parser

    def take_action(self, parsed_args):
        client = self.app.client_manager.composable
        utils.delete_all(self.log, parsed_args.nodes,
                         client.memory_nodes.delete, 'memory node')
