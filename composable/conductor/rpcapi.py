"""Client side of the conductor RPC API, used by composable-api.

Version history:
    1.0 - Initial version.
"""

import oslo_messaging as messaging

from composable.common import rpc


class ConductorAPI(object):
    RPC_API_VERSION = '1.0'

    def __init__(self, timeout=None):
        self.client = rpc.get_client(rpc.CONDUCTOR_TOPIC,
                                     self.RPC_API_VERSION, timeout=timeout)

    def create_lease(self, context, values):
        """Insert a lease and allocate it (unless it starts later).

        ``values`` are validated API fields with references resolved:
        name, description, project_id, user_id, memory_mb, device_count,
        device_kind, device_model, device_traits, requested_pools (pool
        uuids), requested_devices (device uuids), attach_mode, start_at,
        end_at (ISO 8601 strings, UTC). Returns the lease uuid. A lease
        that cannot be placed is still created, in ``alloc_failed`` with a
        fault; input errors raise (and create nothing).
        """
        cctxt = self.client.prepare(version='1.0')
        return cctxt.call(context, 'create_lease', values=values)

    def bind_lease(self, context, lease_uuid, host_uuid, instance_uuid=None,
                   attach_mode=None):
        """Move the lease to ``binding`` and start binding it in the
        background. Raises InvalidState / LeaseLocked / Conflict."""
        cctxt = self.client.prepare(version='1.0')
        return cctxt.call(context, 'bind_lease', lease_uuid=lease_uuid,
                          host_uuid=host_uuid, instance_uuid=instance_uuid,
                          attach_mode=attach_mode)

    def unbind_lease(self, context, lease_uuid):
        cctxt = self.client.prepare(version='1.0')
        return cctxt.call(context, 'unbind_lease', lease_uuid=lease_uuid)

    def delete_lease(self, context, lease_uuid):
        """Move the lease to ``releasing`` and release it in the
        background."""
        cctxt = self.client.prepare(version='1.0')
        return cctxt.call(context, 'delete_lease', lease_uuid=lease_uuid)


def is_timeout(exc):
    return isinstance(exc, messaging.MessagingTimeout)
