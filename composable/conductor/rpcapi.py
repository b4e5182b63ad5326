# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""Client side of the conductor RPC API, used by composable-api.

Version history:
    1.0 - Initial version.
    1.1 - report_lease_usage.
    1.2 - report_devices_restored.
    1.3 - host_memory_leases.
    1.4 - report_host_facts.
    1.5 - update_lease changes name and description too.
    1.6 - report_memory_restored.
    1.7 - report_guest_swap.

While conductors are upgraded, ``[upgrade_levels]conductor`` caps the
version the other services send; a report a capped (older) conductor
would not understand is not sent.
"""

from oslo_log import log as logging

from composable.common import rpc
from composable import conf

LOG = logging.getLogger(__name__)


class ConductorAPI(object):
    RPC_API_VERSION = '1.7'

    def __init__(self, timeout=None):
        self.client = rpc.get_client(
            rpc.CONDUCTOR_TOPIC, self.RPC_API_VERSION, timeout=timeout,
            version_cap=conf.CONF.upgrade_levels.conductor)

    def create_lease(self, context, values, check_fit=True):
        """Insert a lease and allocate it (unless it starts later); the
        lease's document (composable.db.views).

        ``values`` are validated API fields with references resolved:
        name, description, project_id, user_id, memory_mb, device_count,
        device_kind, device_model, device_traits, requested_pools (pool
        uuids), requested_devices (device uuids), attach_mode, start_at,
        end_at (ISO 8601 strings, UTC). A lease that cannot be placed is
        still created, in ``alloc_failed`` with a fault; a device no longer
        free and other input errors raise (and create nothing), and so
        does, with ``check_fit``, a request no pool could ever hold.
        """
        return self.client.call(context, 'create_lease', values=values,
                                check_fit=check_fit)

    def bind_lease(self, context, lease_uuid, host_uuid, instance_uuid=None,
                   attach_mode=None):
        """Move the lease to ``binding`` and start binding it in the
        background. Raises InvalidState / LeaseLocked / Conflict."""
        return self.client.call(context, 'bind_lease',
                                lease_uuid=lease_uuid, host_uuid=host_uuid,
                                instance_uuid=instance_uuid,
                                attach_mode=attach_mode)

    def unbind_lease(self, context, lease_uuid):
        return self.client.call(context, 'unbind_lease',
                                lease_uuid=lease_uuid)

    def delete_lease(self, context, lease_uuid):
        """Move the lease to ``releasing`` and release it in the
        background."""
        return self.client.call(context, 'delete_lease',
                                lease_uuid=lease_uuid)

    def update_lease(self, context, lease_uuid, values):
        """Change the lease's ``name``, ``description`` and ``end_at``
        (ISO 8601 or None), those of them ``values`` holds, under its
        reservation and in one write. Raises Invalid / InvalidState /
        NameInUse / LeaseLocked.

        A change of end_at alone is sent as 1.0, which conductors not yet
        upgraded answer too.
        """
        version = '1.5' if set(values) - {'end_at'} else '1.0'
        cctxt = self.client.prepare(version=version)
        return cctxt.call(context, 'update_lease', lease_uuid=lease_uuid,
                          values=values)

    def report_lease_usage(self, context, host, samples):
        """Report usage samples of the memory leases bound on ``host`` (a
        cast: the agent does not wait).

        ``samples``: a list of {'lease_uuid': str, 'taken_at': ISO 8601
        UTC str, 'used_mb': int, 'size_mb': int}. Samples of leases
        unknown or not bound on ``host`` are dropped.
        """
        cctxt = self.client.prepare(version='1.1')
        cctxt.cast(context, 'report_lease_usage', host=host, samples=samples)

    def report_devices_restored(self, context, host, results):
        """Report what the agent of ``host`` did, after the host
        restarted, to the devices of the leases bound there (a cast: the
        agent does not wait).

        ``results``: a list of {'lease_uuid': str, 'device_uuid': str,
        'address': PCI address str or None, 'ok': bool, 'message': str}:
        ok when the device's function is on vfio-pci again, otherwise the
        message says why not. Results of leases not bound on ``host``, or
        of devices not the lease's, are dropped.
        """
        cctxt = self.client.prepare(version='1.2')
        cctxt.cast(context, 'report_devices_restored', host=host,
                   results=results)

    def report_memory_restored(self, context, host, results):
        """Report the CXL memory regions the agent of ``host`` made again
        after the host restarted (a cast).

        ``results``: a list of {'lease_uuid', 'device' (the CXL memory
        device's name), 'ok': bool, 'numa_node': int or None, 'extents':
        [extent uuid, ...], 'message': str}. Results of leases not bound
        on ``host`` are dropped.
        """
        cctxt = self.client.prepare(version='1.6')
        cctxt.cast(context, 'report_memory_restored', host=host,
                   results=results)

    def report_guest_swap(self, context, host, lease_uuid, instance_uuid,
                          outcome):
        """Report how the guest of ``instance_uuid`` on ``host`` made the
        disks of a guest-mode lease swap after the bind (or grow) had
        answered (a cast: the agent does not wait).

        ``outcome``: {extent uuid: {'guest_device': '/dev/vdb'} or
        {'error': message}}. A report for a lease no longer bound on that
        host and instance is dropped. False, with nothing sent, when the
        conductor is capped below 1.7 (it would not understand it).
        """
        if not self.client.can_send_version('1.7'):
            LOG.info('Not reporting the guest swap of lease %(lease)s to '
                     'the conductor: it is capped below RPC 1.7 '
                     '([upgrade_levels]conductor)', {'lease': lease_uuid})
            return False
        cctxt = self.client.prepare(version='1.7')
        cctxt.cast(context, 'report_guest_swap', host=host,
                   lease_uuid=lease_uuid, instance_uuid=instance_uuid,
                   outcome=outcome)
        return True

    def report_host_facts(self, context, host, facts):
        """Report what the agent of ``host`` knows of its machine (a
        cast: the agent does not wait).

        ``facts``: {'dmi_uuid': the SMBIOS system UUID, or None}. The
        conductor keeps it in the host's ``properties``, where a fabric
        driver matches the host to the fabric's system by it.
        """
        cctxt = self.client.prepare(version='1.4')
        cctxt.cast(context, 'report_host_facts', host=host, facts=facts)

    def sync_pool_placement(self, context, pool_uuid, provider_uuid=None):
        """Ask a conductor to bring the pool's resource provider up to
        date in Placement (a cast: the caller does not wait). For a
        deleted pool, ``provider_uuid`` names the provider to delete."""
        self.client.cast(context, 'sync_pool_placement',
                         pool_uuid=pool_uuid, provider_uuid=provider_uuid)

    # The libvirt hook, through the agent of a compute node. The conductor
    # waits up to ``wait`` seconds for the flows it starts; ``rpc_timeout``
    # must be longer than that.

    def _hook_call(self, context, method, rpc_timeout=None, **kwargs):
        cctxt = self.client.prepare(timeout=rpc_timeout)
        return cctxt.call(context, method, **kwargs)

    def instance_leases(self, context, host):
        """{instance uuid: [lease uuid, ...]} of the leases linked to an
        instance that can be bound to ``host``."""
        return self._hook_call(context, 'instance_leases', host=host)

    def instance_status(self, context, instance_uuid, host=None):
        """Summaries of the instance's leases."""
        return self._hook_call(context, 'instance_status',
                               instance_uuid=instance_uuid, host=host)

    def host_memory_leases(self, context, host):
        """Summaries of the memory leases bound to ``host`` in host mode,
        each with ``memory``: {extent uuid: what the host's agent
        answered when it attached the extent}."""
        cctxt = self.client.prepare(version='1.3')
        return cctxt.call(context, 'host_memory_leases', host=host)

    def prepare_instance(self, context, instance_uuid, host, project_id=None,
                         flavor_resources=False, wait=0, incoming=False,
                         leases=None, user_id=None, extra_specs=None,
                         rpc_timeout=None):
        """Bind the instance's leases to ``host``; {"ok", "message",
        "leases"} once they are bound or after ``wait`` seconds.
        ``flavor_resources``: the flavor asks for composable resources
        (its leases are made first; ``extra_specs`` are its composable:*
        ones)."""
        return self._hook_call(
            context, 'prepare_instance', rpc_timeout=rpc_timeout,
            instance_uuid=instance_uuid, host=host, project_id=project_id,
            flavor_resources=flavor_resources, wait=wait, incoming=incoming,
            leases=leases, user_id=user_id, extra_specs=extra_specs)

    def release_instance(self, context, instance_uuid, host, wait=0,
                         leases=None, fault=None, rpc_timeout=None):
        """Unbind the instance's leases from ``host``; they stay the
        instance's. {"ok", "message", "leases"}."""
        return self._hook_call(
            context, 'release_instance', rpc_timeout=rpc_timeout,
            instance_uuid=instance_uuid, host=host, wait=wait, leases=leases,
            fault=fault)
