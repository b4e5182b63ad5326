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

from osc_lib import exceptions

from composable.cli import utils
from composable.cli.v1 import base
from composable.common import media
from composable.common import resource_classes
from composable.common import sriov as sriov_words

KINDS = ('memory', 'gpu', 'pci')
SRIOV_VF_MODES = sriov_words.VF_MODES
MEDIA = media.MEDIA

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
        parser.add_argument(
            '--medium', choices=MEDIA,
            help='Memory pools (API 1.5 or later): network (default: '
                 'memory nodes exported over iSCSI) or cxl (CXL memory '
                 'devices of a fabric of driver cxl, leased in whole '
                 'chunks of --step-size, default 256 MiB, and onlined on '
                 'the bound host as a NUMA node)')
        parser.add_argument('--description', metavar='<description>',
                            help='Description')
        sriov_group = parser.add_argument_group(
            'SR-IOV virtual functions (pci pools, API 1.3 or later)')
        sriov_group.add_argument(
            '--sriov-host', metavar='<host>',
            help='Make the pool of the virtual functions of a physical '
                 'function of this host (name or UUID)')
        sriov_group.add_argument(
            '--sriov-pf', metavar='<pci-address>',
            help='PCI address of the physical function on that host, '
                 'e.g. 0000:41:00.0')
        sriov_group.add_argument(
            '--sriov-vfs', metavar='<count>', type=utils.non_negative_int,
            help='How many virtual functions (one device of the pool '
                 'each, one per lease)')
        sriov_group.add_argument(
            '--sriov-vf-mode', choices=SRIOV_VF_MODES,
            help='on_demand (default): made when a lease is first bound '
                 'and removed when none holds one; precreated: made by '
                 'the host\'s [compute_node]sriov_numvfs')
        sriov_group.add_argument(
            '--sriov-vendor-id', metavar='<id>',
            help='PCI vendor id of the virtual functions, checked on the '
                 'host')
        sriov_group.add_argument(
            '--sriov-product-id', metavar='<id>',
            help='PCI device id of the virtual functions, checked on the '
                 'host')
        return parser

    def _sriov(self, parsed_args):
        given = {'host': parsed_args.sriov_host,
                 'pf_address': parsed_args.sriov_pf,
                 'vf_count': parsed_args.sriov_vfs,
                 'vf_mode': parsed_args.sriov_vf_mode,
                 'vendor_id': parsed_args.sriov_vendor_id,
                 'product_id': parsed_args.sriov_product_id}
        given = {k: v for k, v in given.items() if v is not None}
        if not given:
            return None
        missing = [option for option, key in (
            ('--sriov-host', 'host'), ('--sriov-pf', 'pf_address'),
            ('--sriov-vfs', 'vf_count')) if key not in given]
        if missing:
            raise exceptions.CommandError(
                'A pool of SR-IOV virtual functions needs %s too'
                % ', '.join(missing))
        version = self.manager.client.api_version
        if tuple(int(p) for p in version.split('.')) < (1, 3):
            raise exceptions.CommandError(
                'Pools of SR-IOV virtual functions need API version 1.3 or '
                'later: add --os-composable-api-version 1.3 (this client '
                'uses %s)' % version)
        return given

    def fields(self, parsed_args):
        fields = {'name': parsed_args.name, 'kind': parsed_args.kind,
                  'fabric': parsed_args.fabric}
        sriov = self._sriov(parsed_args)
        if sriov is not None:
            fields['sriov'] = sriov
        if parsed_args.device_class is not None:
            fields['device_class'] = parsed_args.device_class
        if parsed_args.traits:
            fields['traits'] = parsed_args.traits
        if parsed_args.reserved is not None:
            fields['reserved'] = parsed_args.reserved
        if parsed_args.step_size is not None:
            fields['step_size'] = parsed_args.step_size
        if parsed_args.medium is not None:
            version = self.manager.client.api_version
            if tuple(int(p) for p in version.split('.')) < (1, 5):
                raise exceptions.CommandError(
                    'The medium of a memory pool needs API version 1.5 or '
                    'later: add --os-composable-api-version 1.5 (this '
                    'client uses %s)' % version)
            fields['medium'] = parsed_args.medium
        if parsed_args.description is not None:
            fields['description'] = parsed_args.description
        return fields


class ListPool(base.ListCommand):
    """List pools with their capacity."""

    resource = POOL
    columns = ['uuid', 'name', 'kind', 'resource_class', 'total',
               'reserved', 'used', 'free']
    long_columns = ['fabric_uuid', 'traits', 'step_size', 'medium',
                    'provider_uuid', 'description']
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
