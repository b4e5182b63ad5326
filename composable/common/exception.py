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

"""Exceptions with the HTTP status and error code the API returns for them.

The message of every exception is written for the person who made the
request: it says what was wrong and, where it can, what to do instead.
Messages never carry secrets (CHAP secrets, fabric credentials).
"""


class ComposableException(Exception):
    """Base class. ``code`` is the HTTP status, ``error_code`` the
    machine-readable code in the OpenStack error body."""

    msg_fmt = 'An unknown error occurred.'
    code = 500
    error_code = 'composable.error'
    safe = False  # True: the message may be shown to users as it is.

    def __init__(self, message=None, **kwargs):
        self.kwargs = kwargs
        if not message:
            try:
                message = self.msg_fmt % kwargs
            except (KeyError, TypeError):
                message = self.msg_fmt
        self.message = message
        super().__init__(message)


class Invalid(ComposableException):
    msg_fmt = 'Invalid request: %(reason)s'
    code = 400
    error_code = 'composable.invalid'
    safe = True


class NotFound(ComposableException):
    msg_fmt = 'Not found.'
    code = 404
    error_code = 'composable.not_found'
    safe = True


class Conflict(ComposableException):
    msg_fmt = 'Conflict: %(reason)s'
    code = 409
    error_code = 'composable.conflict'
    safe = True


class Forbidden(ComposableException):
    msg_fmt = 'Policy does not allow %(action)s to be performed.'
    code = 403
    error_code = 'composable.forbidden'
    safe = True


class NotInVersion(NotFound):
    msg_fmt = ('%(what)s is available from microversion %(version)s on; '
               'send "OpenStack-API-Version: composable %(version)s".')
    error_code = 'composable.microversion.not_available'


class FabricNotFound(NotFound):
    msg_fmt = 'Fabric %(fabric)s could not be found.'
    error_code = 'composable.fabric.not_found'


class HostNotFound(NotFound):
    msg_fmt = 'Host %(host)s could not be found.'
    error_code = 'composable.host.not_found'


class MemoryNodeNotFound(NotFound):
    msg_fmt = 'Memory node %(memory_node)s could not be found.'
    error_code = 'composable.memory_node.not_found'


class PoolNotFound(NotFound):
    msg_fmt = 'Pool %(pool)s could not be found.'
    error_code = 'composable.pool.not_found'


class DeviceNotFound(NotFound):
    msg_fmt = 'Device %(device)s could not be found.'
    error_code = 'composable.device.not_found'


class LeaseNotFound(NotFound):
    msg_fmt = 'Lease %(lease)s could not be found.'
    error_code = 'composable.lease.not_found'


class DuplicateName(Conflict):
    msg_fmt = 'A %(resource)s named %(name)s already exists.'
    error_code = 'composable.duplicate_name'


class InUse(Conflict):
    msg_fmt = '%(resource)s %(name)s is in use: %(reason)s'
    error_code = 'composable.in_use'


class NameInUse(Conflict):
    msg_fmt = ('A lease named %(name)s already exists in this project and '
               'is not released; choose another name, or delete that lease '
               'first.')
    error_code = 'composable.lease.name_in_use'


class DeviceInLease(InUse):
    """A device's state follows its lease; only the lease changes it."""

    def __init__(self, message=None, **kwargs):
        kwargs.setdefault('resource', 'Device')
        kwargs.setdefault('reason',
                          'it is in a lease; its state follows the lease')
        super().__init__(message, **kwargs)


class PoolCapacityInUse(InUse):
    """Taking a device out of service would leave its pool with less than
    its leases hold."""


class InvalidState(Conflict):
    msg_fmt = ('Lease %(lease)s is %(status)s; %(action)s is not possible in '
               'that state.%(hint)s')
    error_code = 'composable.lease.invalid_state'

    def __init__(self, message=None, **kwargs):
        kwargs.setdefault('hint', '')
        super().__init__(message, **kwargs)


class HostMemoryInUse(Conflict):
    """Taking a lease's CXL memory off its host would leave the compute
    node less MEMORY_MB than its instances hold."""
    error_code = 'composable.lease.host_memory_in_use'


class LeaseLocked(Conflict):
    msg_fmt = ('Lease %(lease)s is busy with another operation; try again '
               'in a few seconds.')
    error_code = 'composable.lease.locked'


class DeviceAlreadyLeased(Conflict):
    msg_fmt = 'Device %(device)s is already in lease %(lease)s.'
    error_code = 'composable.device.leased'


class DeviceUnavailable(Conflict):
    msg_fmt = 'Device %(device)s is %(state)s and cannot be leased.'
    error_code = 'composable.device.unavailable'


class InsufficientCapacity(ComposableException):
    """Not raised to the API: a lease that cannot be placed is kept in
    ``alloc_failed`` with this message as its fault."""
    msg_fmt = '%(reason)s'
    code = 409
    error_code = 'composable.capacity'
    safe = True


class DriverError(ComposableException):
    msg_fmt = '%(reason)s'
    error_code = 'composable.driver'
    safe = True


class DriverTimeout(DriverError):
    msg_fmt = '%(what)s did not answer within %(timeout)s seconds.'
    error_code = 'composable.driver.timeout'


class AgentUnavailable(DriverError):
    msg_fmt = ('The composable-agent on %(host)s did not answer within '
               '%(timeout)s seconds; check that it runs and reaches the '
               'message bus.')
    error_code = 'composable.agent.unavailable'


class ServiceUnavailable(ComposableException):
    msg_fmt = '%(reason)s'
    code = 503
    error_code = 'composable.unavailable'
    safe = True
