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

"""``openstack composable lease ...``"""

from osc_lib.command import command
from osc_lib import exceptions

from composable.cli import utils
from composable.cli.v1 import base
from composable.common import states

ATTACH_MODES = states.ATTACH_MODES

LIST_COLUMNS = ['uuid', 'name', 'status', 'memory_mb', 'device_count',
                'device_kind', 'host', 'end_at']
LONG_COLUMNS = ['project_id', 'user_id', 'attach_mode', 'instance_uuid',
                'device_model', 'memory_pool_uuid', 'device_pool_uuid',
                'start_at', 'fault', 'created_at', 'updated_at']
SHOW_FIRST = ('uuid', 'name', 'status', 'fault', 'memory_mb',
              'device_count', 'device_kind')
USAGE_COLUMNS = ['taken_at', 'used_mb', 'size_mb']
ACTION_COLUMNS = ['action', 'request_id', 'user_id', 'project_id',
                  'start_time', 'finish_time', 'result', 'message']


def _show(lease):
    return utils.show(lease, first=SHOW_FIRST)


LEASE = base.Resource('leases', 'Lease', render=_show)


class CreateLease(base.CreateCommand):
    """Lease memory and/or devices from the pools.

    The lease is placed at once (or at --start); if the pools cannot give
    it right now it is still created, in status alloc_failed, with a fault
    telling what was free.
    """

    resource = LEASE

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('name', metavar='<name>', help='Lease name')
        parser.add_argument(
            '--memory', metavar='<size>', type=utils.size_type(),
            help='Memory to lease (%s)' % utils.SIZE_HELP)
        parser.add_argument(
            '--gpu', metavar='<count>', type=utils.positive_int,
            help='Number of GPUs to lease (same as --device-kind gpu '
                 '--device-count N)')
        parser.add_argument(
            '--gpu-model', metavar='<model>',
            help='GPU (or device) model wanted, e.g. A100')
        parser.add_argument(
            '--device-kind', metavar='<kind>',
            help='Kind of device: gpu or a PCI device class in lower '
                 'case, e.g. nvme or nic. Default: the kind of the devices '
                 'or device pools given (--device, --pool), else gpu')
        parser.add_argument(
            '--device-count', metavar='<count>', type=utils.positive_int,
            help='Number of devices to lease')
        parser.add_argument(
            '--device', metavar='<uuid>', dest='devices', action='append',
            help='Lease this very device (repeat for several)')
        parser.add_argument(
            '--trait', metavar='<trait>', dest='traits', action='append',
            help='Trait the devices must have (repeat for several)')
        parser.add_argument(
            '--pool', metavar='<pool>', dest='pools', action='append',
            help='Pool to take from (name or UUID; repeat to allow '
                 'several; default: any pool of the right kind)')
        parser.add_argument(
            '--attach-mode', choices=ATTACH_MODES,
            help='host: the memory/devices go to the host; guest: to the '
                 'server bound to the lease (network memory as swap '
                 'disks); virtio-mem: CXL memory plugged into the server '
                 'bound to the lease (API 1.6; default host)')
        parser.add_argument(
            '--start', metavar='<time>', type=utils.time_type,
            help='When the lease starts (ISO 8601; default now; no offset '
                 'means UTC)')
        parser.add_argument(
            '--end', metavar='<time>', type=utils.time_type,
            help='When the lease ends (ISO 8601; no offset means UTC)')
        parser.add_argument('--description', metavar='<description>',
                            help='Description')
        elastic = parser.add_argument_group(
            'elastic memory leases',
            'The lease grows and shrinks with its use, predicted from its '
            'usage over the observation window, within --elastic-min and '
            '--elastic-max (API 1.2). --memory is the size it starts at.')
        elastic.add_argument(
            '--elastic-min', metavar='<size>', type=utils.size_type(),
            help='Smallest size (%s); makes the lease elastic' %
                 utils.SIZE_HELP)
        elastic.add_argument(
            '--elastic-max', metavar='<size>', type=utils.size_type(),
            help='Largest size (%s)' % utils.SIZE_HELP)
        elastic.add_argument(
            '--observation-window', metavar='<seconds>',
            type=utils.positive_int, default=300,
            help='Seconds of usage the prediction is fitted to (default '
                 '300)')
        elastic.add_argument(
            '--prediction-window', metavar='<seconds>',
            type=utils.positive_int, default=60,
            help='Seconds ahead whose peak is provisioned for (default '
                 '60)')
        elastic.add_argument(
            '--headroom', metavar='<fraction>', type=float,
            help='Fraction of the predicted peak added on top (default '
                 '0.2)')
        return parser

    @staticmethod
    def elastic(parsed_args):
        low, high = parsed_args.elastic_min, parsed_args.elastic_max
        if low is None and high is None:
            if parsed_args.headroom is not None:
                raise exceptions.CommandError(
                    '--headroom is for elastic leases: give --elastic-min '
                    'and --elastic-max')
            return None
        if low is None or high is None:
            raise exceptions.CommandError(
                'An elastic lease needs both --elastic-min and '
                '--elastic-max')
        if parsed_args.memory is None:
            raise exceptions.CommandError(
                'An elastic lease leases memory: give --memory (the size it '
                'starts at)')
        policy = {'min_mb': low, 'max_mb': high,
                  'observation_window': parsed_args.observation_window,
                  'prediction_window': parsed_args.prediction_window}
        if parsed_args.headroom is not None:
            policy['headroom'] = parsed_args.headroom
        return policy

    def fields(self, parsed_args):
        fields = {'name': parsed_args.name}
        elastic = self.elastic(parsed_args)
        if elastic is not None:
            fields['elastic'] = elastic
        if parsed_args.memory is not None:
            fields['memory_mb'] = parsed_args.memory
        count = parsed_args.device_count
        kind = parsed_args.device_kind
        if parsed_args.gpu is not None:
            if count is not None and count != parsed_args.gpu:
                raise exceptions.CommandError(
                    '--gpu %d and --device-count %d disagree: give one of '
                    'them' % (parsed_args.gpu, count))
            if kind is not None and kind != 'gpu':
                raise exceptions.CommandError(
                    '--gpu asks for GPUs but --device-kind is %s' % kind)
            count = parsed_args.gpu
            kind = 'gpu'
        if count is not None:
            fields['device_count'] = count
        if kind is not None:
            fields['device_kind'] = kind
        if parsed_args.gpu_model is not None:
            fields['device_model'] = parsed_args.gpu_model
        if parsed_args.traits:
            fields['device_traits'] = parsed_args.traits
        if parsed_args.devices:
            fields['device_uuids'] = parsed_args.devices
        if parsed_args.pools:
            fields['pools'] = parsed_args.pools
        if parsed_args.attach_mode is not None:
            fields['attach_mode'] = parsed_args.attach_mode
        if parsed_args.start is not None:
            fields['start_at'] = parsed_args.start
        if parsed_args.end is not None:
            fields['end_at'] = parsed_args.end
        if parsed_args.description is not None:
            fields['description'] = parsed_args.description
        if not ('memory_mb' in fields or 'device_count' in fields or
                'device_uuids' in fields):
            raise exceptions.CommandError(
                'Nothing to lease: give --memory, --gpu, --device-count or '
                '--device')
        if (parsed_args.start and parsed_args.end and
                parsed_args.end <= parsed_args.start):
            raise exceptions.CommandError('--end must be after --start')
        return fields


class ListLease(base.ListCommand):
    """List leases (by default those of your project, released ones
    hidden)."""

    resource = LEASE
    columns = LIST_COLUMNS
    long_columns = LONG_COLUMNS

    def add_filters(self, parser):
        parser.add_argument(
            '--all-projects', action='store_true', default=False,
            help='Leases of every project (admin only)')
        parser.add_argument(
            '--project', metavar='<project-id>',
            help='Leases of this project (admin only)')
        parser.add_argument(
            '--status', metavar='<status>',
            help='Only leases in this status (released leases are only '
                 'listed when asked for)')
        parser.add_argument('--pool', metavar='<pool>',
                            help='Only leases taking from this pool')
        parser.add_argument(
            '--kind', metavar='<kind>',
            help='Only leases of this kind: memory, gpu or a device kind')
        parser.add_argument('--host', metavar='<host>',
                            help='Only leases bound to this host')
        parser.add_argument('--server', metavar='<server-uuid>',
                            help='Only leases bound to this server')
        parser.add_argument('--name', metavar='<name>',
                            help='Only leases with this name')

    def list_filters(self, parsed_args):
        filters = {
            'project_id': parsed_args.project,
            'status': parsed_args.status,
            'pool': parsed_args.pool,
            'kind': parsed_args.kind,
            'host': parsed_args.host,
            'instance_uuid': parsed_args.server,
            'name': parsed_args.name,
        }
        if parsed_args.all_projects:
            filters['all_projects'] = 'true'
        return filters


class ShowLease(base.ShowCommand):
    """Show a lease, with its memory extents and devices."""

    resource = LEASE


class SetLease(base.SetCommand):
    """Rename a lease, change its description or its end."""

    resource = LEASE

    def add_options(self, parser):
        parser.add_argument('--name', metavar='<name>', help='New name')
        parser.add_argument('--description', metavar='<description>',
                            help='Description')
        parser.add_argument(
            '--end', metavar='<time>', type=utils.time_type,
            help='New end of the lease (ISO 8601; no offset means UTC)')

    def changes(self, parsed_args):
        fields = {}
        if parsed_args.name is not None:
            fields['name'] = parsed_args.name
        if parsed_args.description is not None:
            fields['description'] = parsed_args.description
        if parsed_args.end is not None:
            fields['end_at'] = parsed_args.end
        return fields


class DeleteLease(base.DeleteCommand):
    """Delete leases: their memory and devices go back to the pools."""

    resource = LEASE


class BindLease(base.ShowCommand):
    """Bind a lease to a server or a host: attach what it holds.

    --host alone binds to a host; --server alone to a server, on the host
    where Nova says it runs; both bind to the server on that host.
    """

    resource = LEASE

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('--server', metavar='<server-uuid>',
                            help='Nova server to bind the lease to (with '
                                 'no --host, on the host it runs on)')
        parser.add_argument('--host', metavar='<host>',
                            help='Host to bind the lease to (name or '
                                 'UUID); with --server, the host the '
                                 'server runs on')
        parser.add_argument(
            '--attach-mode', choices=ATTACH_MODES,
            help='host, guest or virtio-mem (API 1.6, CXL pools only) '
                 '(default: the lease\'s attach mode); guest and '
                 'virtio-mem need --server')
        self._parser = parser
        return parser

    def take_action(self, parsed_args):
        if parsed_args.server is None and parsed_args.host is None:
            self._parser.error('give --host, --server, or both')
        return _show(self.manager.bind(
            parsed_args.lease, host=parsed_args.host,
            server=parsed_args.server, attach_mode=parsed_args.attach_mode))


class UnbindLease(base.ShowCommand):
    """Unbind a lease: detach what it holds (the lease stays reserved)."""

    resource = LEASE

    def take_action(self, parsed_args):
        return _show(self.manager.unbind(parsed_args.lease))


class ListLeaseAction(command.Lister):
    """List the actions done on a lease (create, bind, unbind, ...)."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        LEASE.add_ident(parser)
        return parser

    def take_action(self, parsed_args):
        return utils.table(LEASE.manager(self.app).actions(parsed_args.lease),
                           ACTION_COLUMNS)


class ShowLeaseUsage(command.Lister):
    """Show the usage history of a memory lease: how much of it held pages,
    as its host reported it (API 1.1)."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        LEASE.add_ident(parser)
        parser.add_argument(
            '--since', metavar='<time>', type=utils.time_type,
            help='Only samples taken at or after this time (ISO 8601; no '
                 'offset means UTC)')
        parser.add_argument(
            '--limit', metavar='<count>', type=utils.positive_int,
            help='At most this many samples (the oldest first)')
        parser.add_argument(
            '--marker', metavar='<sample-id>', type=utils.non_negative_int,
            help='Only samples after this one (the id of the last sample '
                 'of the previous page, shown with --long)')
        parser.add_argument('--long', action='store_true', default=False,
                            help='Show the samples\' ids too')
        return parser

    def take_action(self, parsed_args):
        columns = list(USAGE_COLUMNS)
        if parsed_args.long:
            columns = ['id'] + columns
        return utils.table(
            LEASE.manager(self.app).usage(parsed_args.lease,
                                          since=parsed_args.since,
                                          limit=parsed_args.limit,
                                          marker=parsed_args.marker),
            columns)
