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

"""What the conductor does to a lease: allocate, bind, unbind, release.

Each flow is given the task (composable.conductor.task.LeaseTask) whose
reservation its worker holds, and works on ``task.lease``, the lease as
the task read it, starting in the transient state the task moved it to
(allocating, binding, unbinding, releasing). Every status change goes
through the task (the state machine of composable.common.states, a
compare-and-set on the current status); the flow ends with
``task.finish``. A bind reads the lease no more: what it writes of the
extents is set on the rows it holds, and its last write of the attachment
commits with the lease's move to ``bound``.

Every step is idempotent and leaves a mark in the database *before* it
acts, so a flow cut short at any point (conductor killed, agent or fabric
timeout) can be run again, or torn down, by whoever resumes it:

* an extent has CHAP credentials from just before its export is asked
  for until it is unexported: credentials present = "may be exported";
* a host agent was asked to attach something once the lease has an
  Attachment row that is not ``detached``;
* a device may be bound on the fabric once the lease has a host.

Bind: export every extent on its memory node (credentials per extent and
per bind, from ``secrets``), attach the memory on the host, bind every
device on the fabric and attach it on the host, record the Attachment,
then ``bound``. Unbind and release tear down in the reverse order: detach
devices, fabric unbind, detach memory, unexport. Release then scrubs every
extent on its memory node and gives the capacity back
(allocator.release_capacity).

A lease of CXL memory (a pool of medium cxl) exports nothing: bind asks
the fabric driver to make each of its memory devices reachable from the
host (the ``local`` back end checks the host is wired to it) and passes
the devices' locators to the host's agent, which makes and onlines the
regions; unbind has the agent offline, erase and destroy them. A host
that does not answer is never abandoned with CXL memory: its regions map
the devices until the host itself removes them.

A failure moves the lease to ``alloc_failed`` / ``bind_failed`` /
``error`` with a fault the user can act on, and ends the running lease
action with result ``error``. A failed bind first undoes what it did,
skipping nodes that did not answer (whatever it could not undo stays
marked and is undone by unbind or delete).

CHAP secrets are never logged and never put in faults or action messages.
"""

import secrets

from oslo_log import log as logging
import oslo_messaging as messaging

from composable.agent import rpcapi as agent_rpcapi
from composable.common import exception
from composable.common import locator as locator_mod
from composable.common import media
from composable.common import sriov
from composable.common import states
from composable.common import utils
from composable.conductor.allocator import claims as allocator
from composable.conductor.placement import claims as placement_claims
from composable.conductor.placement import host_memory
from composable.conductor import rules
from composable.conductor import task as lease_task
from composable import conf
from composable.db import api as db_api
from composable import fabric as fabric_drivers

CONF = conf.CONF
LOG = logging.getLogger(__name__)

# What an unexport (and a scrub) clears of an extent's export, in the
# write that moves its export state (db_api.extent_transition).
CLEAR_EXPORT = {'target_iqn': None, 'lun': None, 'chap_username': None,
                'chap_secret': None}


class StepFailed(Exception):
    """One step of a flow failed; ``message`` says which step, where, and
    why, in words for the lease's owner."""

    def __init__(self, message, node=None, unreachable=False):
        super().__init__(message)
        self.message = message
        self.node = node
        self.unreachable = unreachable


StatusChanged = lease_task.StatusChanged


def new_chap_credentials():
    # Random per extent and per bind: a secret that leaks from one export
    # opens nothing else. 16 characters suit every iSCSI initiator.
    return ('composable-' + secrets.token_urlsafe(6),
            secrets.token_urlsafe(12))


# ---------------------------------------------------------------- views

def lease_view(lease):
    return {'uuid': lease.uuid, 'name': lease.name,
            'project_id': lease.project_id,
            'attach_mode': lease.attach_mode,
            'instance_uuid': lease.instance_uuid,
            'memory_mb': lease.memory_mb,
            'device_count': len(lease.devices or []),
            'host': lease.host.name if lease.host is not None else None,
            # What the exports are restricted to: the bound host's agent
            # must log in with this name.
            'initiator_iqn': (lease.host.initiator_iqn
                              if lease.host is not None else None),
            # The most an elastic lease may grow to: a virtio-mem device
            # is plugged with that much address space at the first bind,
            # so that it can grow later (None for a lease of fixed size).
            'max_mb': (int(lease.elastic['max_mb'])
                       if getattr(lease, 'elastic', None) else None)}


def extent_view(lease, extent, portal=None, credentials=False):
    node = extent.memory_node
    view = {'uuid': extent.uuid, 'index': extent.index,
            'size_mb': extent.size_mb, 'lease_uuid': lease.uuid,
            'memory_node': node.name,
            'portal': portal or node.portal,
            'transport': node.transport,
            'target_iqn': extent.target_iqn, 'lun': extent.lun,
            # The account name (not its secret) lets an exporter remove
            # the account even when its target is already gone.
            'chap_username': extent.chap_username}
    if credentials:
        view['chap_secret'] = extent.chap_secret
    if media.is_cxl(node.pool):
        # Chunks of a CXL memory device: the host makes a region of them;
        # nothing is exported.
        view.update(medium=media.CXL, device=node.name, portal=None,
                    transport=None)
    return view


def device_view(device):
    view = {'id': device.id, 'uuid': device.uuid, 'address': device.address,
            'kind': device.kind, 'model': device.model,
            'vendor_id': device.vendor_id, 'product_id': device.product_id,
            'pci_address': device.pci_address}
    if sriov.is_sriov_pool(device.pool):
        # A virtual function: made and found on its host by the agent,
        # never bound on the fabric.
        view['sriov'] = sriov.device_sriov(device.pool, device.address)
    return view


def _row(obj):
    return obj.as_dict() if obj is not None else None


def _mirror(row, values):
    """Set on ``row`` (read before, detached) the ``values`` just written
    to its database row, so the flow goes on with the row as it is now
    without reading it again."""
    for key, value in values.items():
        setattr(row, key, value)


class LeaseFlows(object):
    """The flows, for one conductor (``host``)."""

    def __init__(self, host, agent_api=None):
        self.host = host
        self._agents = agent_api

    @property
    def agents(self):
        if self._agents is None:
            self._agents = agent_rpcapi.AgentAPI()
        return self._agents

    # ------------------------------------------------------------ helpers

    def call_agent(self, context, node, what, call, *args, **kwargs):
        """``call(context, node, *args, **kwargs)``, one method of the
        agent RPC API (``self.agents.attach_memory``, ...), on agent
        ``node``; its failures become StepFailed saying ``what`` failed."""
        try:
            return call(context, node, *args, **kwargs)
        except messaging.MessagingTimeout:
            exc = exception.AgentUnavailable(
                host=node, timeout=CONF.rpc_response_timeout_bind)
            raise StepFailed('%s: %s' % (what, exc.message), node=node,
                             unreachable=True)
        except exception.ComposableException as exc:
            raise StepFailed('%s: %s' % (what, exc.message), node=node)
        except messaging.RemoteError as exc:
            # An unexpected error in the agent: its type and message only;
            # the traceback stays in the agent's log.
            raise StepFailed('%s: the composable-agent on %s failed (%s); '
                             'see its log' % (what, node, exc.exc_type),
                             node=node)

    @staticmethod
    def _fabric_driver(fabric, what):
        """The driver of ``fabric`` (a row as a dict); StepFailed saying
        ``what`` failed when it cannot be loaded."""
        try:
            return fabric_drivers.get_driver(fabric['driver'])
        except exception.DriverError as exc:
            raise StepFailed('%s: %s' % (what, exc.message))

    def _call_fabric(self, fabric, what, call, *args):
        """Run ``call(fabric, *args)``, one method of the fabric's driver
        (fabric.base.FabricDriver: ``driver.bind_device``, ...), at most
        [fabric]operation_timeout seconds.

        The call runs in a daemon thread: a driver stuck on hardware cannot
        hold the flow (or the conductor's shutdown) forever. The operation
        is idempotent, so whatever it did late is redone or undone by the
        next flow on the lease.
        """
        timeout = CONF.fabric.operation_timeout
        try:
            return utils.call_with_timeout(
                lambda: call(fabric, *args), timeout,
                'Fabric %s (driver %s)' % (fabric['name'], fabric['driver']),
                name='fabric-%s' % call.__name__)
        except Exception as error:
            if isinstance(error, exception.ComposableException):
                reason = error.message
            elif isinstance(error, locator_mod.InvalidLocator):
                # What the fabric reports of the device, not connection
                # details.
                reason = ('the fabric driver answered a locator the host '
                          'cannot use: %s' % error)
            else:
                # Driver internals may carry connection details: log them
                # for the operator, show the user only the type.
                LOG.error('Fabric driver %(driver)s failed: %(exc)r',
                          {'driver': fabric['driver'], 'exc': error})
                reason = ('the fabric driver failed (%s); see the '
                          'conductor log' % type(error).__name__)
            raise StepFailed('%s: %s' % (what, reason))

    # ------------------------------------------------------------ allocate

    def allocate(self, task, action='create', raise_input_errors=False):
        """Claim the lease's capacity: allocating -> reserved, or
        alloc_failed with the allocator's message as the fault.

        With ``raise_input_errors``, errors in what was asked (Invalid,
        NotFound, Conflict) propagate to the caller, which deletes the new
        lease; otherwise they become the fault.
        """
        context, lease_id = task.context, task.lease_id
        try:
            allocator.allocate(context, lease_id)
        except exception.InsufficientCapacity as exc:
            return task.finish(states.FAIL, action, fault=exc.message)
        except (exception.Invalid, exception.NotFound,
                exception.Conflict) as exc:
            if raise_input_errors:
                raise
            return task.finish(states.FAIL, action, fault=exc.message)
        except Exception:
            LOG.exception('Allocating lease %s failed', lease_id)
            return task.finish(
                states.FAIL, action,
                fault='Allocation failed because of an internal error '
                      '(request %s); delete the lease and try again, or '
                      'tell your cloud operator.' %
                      getattr(context, 'request_id', None))
        # The allocator moved the lease to reserved itself (same
        # transaction as the claim), with its extents and devices.
        task.mark_stale()
        if placement_claims.enabled() and not (
                placement_claims.claim_allocated(task, action)):
            # Refused by Placement: rolled back, alloc_failed, action ended.
            return states.ALLOC_FAILED
        db_api.action_finish(context, lease_id, action, 'success')
        return states.RESERVED

    # ------------------------------------------------------------ bind

    def bind(self, task, action='bind'):
        """Bind the task's lease to its host: binding -> bound, or
        bind_failed with the failed step as the fault (what was done is
        undone first); the lease's new status."""
        lease = task.lease
        if lease.status != states.BINDING:
            LOG.info('Lease %(lease)s is %(status)s, not binding; nothing '
                     'to bind.', {'lease': lease.uuid,
                                  'status': lease.status})
            return lease.status
        # Debug-level marks of the bind's phases (tools/bench/memory_bind.py
        # reads them); nothing is logged at the default level.
        LOG.debug('Lease %s: bind started', lease.uuid)
        try:
            attached = self._bind(task)
        except Exception as exc:
            fault = self._fault('Binding', exc, lease,
                                ' Bind the lease again once that is fixed, '
                                'or unbind or delete it.')
            unreachable = set()
            if isinstance(exc, StepFailed) and exc.unreachable:
                unreachable.add(exc.node)
            try:
                self._undo_failed_bind(task, unreachable)
            except Exception:
                # What was not undone stays marked; unbind or delete
                # finish it. The lease must still leave binding.
                LOG.exception('Undoing the failed bind of lease %s failed',
                              lease.uuid)
            return task.finish(states.FAIL, action, fault=fault)
        return task.finish(states.DONE, action, attachment=attached)

    def _fault(self, doing, exc, lease, advice):
        if isinstance(exc, StepFailed):
            return '%s failed while %s%s' % (doing, exc.message, advice)
        LOG.error('%(doing)s lease %(lease)s failed: %(exc)r',
                  {'doing': doing, 'lease': lease.uuid, 'exc': exc})
        return ('%s failed because of an internal error (%s); tell your '
                'cloud operator.%s' % (doing, type(exc).__name__, advice))

    def _bind(self, task):
        """The steps of a bind; the attachment's last write, ``(id,
        values)``, for the commit that moves the lease to bound (None when
        it is written already)."""
        context, lease = task.context, task.lease
        host = lease.host
        if host is None:
            raise StepFailed('preparing: the lease has no host to bind to')
        # A previous bind to another host that was never fully undone is
        # torn down first, so no export stays open to the old initiator.
        live = db_api.attachment_list(
            context, lease.id, states_=states.LIVE_ATTACHMENT_STATES)
        stale = [a for a in live if a.host_id != host.id]
        if stale:
            LOG.info('Lease %s has live attachments to other hosts; tearing '
                     'them down before binding to %s', lease.uuid, host.name)
            self.teardown(task)
            lease = task.reload()
            live = None

        cxl = media.is_cxl(lease.memory_pool)
        if lease.extents and not cxl and not host.initiator_iqn:
            raise StepFailed(
                'preparing: host %s has no initiator_iqn, so no memory can '
                'be exported to it; an administrator must set it '
                '(openstack composable host set --initiator-iqn)' %
                host.name)

        view = lease_view(lease)
        portals = {}
        locators = {}
        if cxl:
            locators = self._cxl_locators(lease, host)
        else:
            for extent in lease.extents:
                portals[extent.uuid] = self._export(context, lease, extent,
                                                    host)
        # The exports' marks were written to the database and to the
        # extents read at the start (_export): no need to read the lease
        # again, nothing else changes it under its reservation.
        attachment = self._attachment(context, lease, host, live)
        details = dict(attachment.details or {})
        if locators:
            # What the fabric composed, before the host is asked: an
            # unbind after a failed attach takes exactly that back.
            details['cxl_locators'] = locators
            db_api.attachment_update(context, attachment.id,
                                     {'details': details})

        if lease.extents:
            if cxl:
                extents = self.cxl_extent_views(lease, lease.extents,
                                                locators)
            else:
                extents = [extent_view(lease, e, portal=portals.get(e.uuid),
                                       credentials=True)
                           for e in lease.extents]
            LOG.debug('Lease %(lease)s: extents exported, attaching on '
                      '%(host)s', {'lease': lease.uuid, 'host': host.name})
            memory = self.call_agent(
                context, host.name,
                'attaching the memory on host %s' % host.name,
                self.agents.attach_memory, view, extents, lease.attach_mode,
                lease.instance_uuid)
            LOG.debug('Lease %(lease)s: memory attached on %(host)s',
                      {'lease': lease.uuid, 'host': host.name})
            details['memory'] = memory or {}
            details['portals'] = portals

        if lease.devices:
            devices = []
            locators = {}
            for device in lease.devices:
                if sriov.is_sriov_pool(device.pool):
                    devices.append(self._virtual_function(lease, device,
                                                          host))
                    continue
                fabric = device.pool.fabric
                what = ('binding device %s to host %s on fabric %s' %
                        (device.uuid, host.name, fabric.name))
                view_dev = device_view(device)
                fabric_row = _row(fabric)
                driver = self._fabric_driver(fabric_row, what)
                # What the driver left unknown is taken from the
                # device's row.
                found = self._driver_locator(
                    fabric, what, self._call_fabric(
                        fabric_row, what, driver.bind_device, view_dev,
                        _row(host)),
                    vendor_id=device.vendor_id, product_id=device.product_id,
                    serial=device.serial, fabric_ref=device.address)
                # The host's bus address only where the fabric knows it;
                # otherwise the compute agent finds the function by the
                # rest of the locator.
                pci = found.pci_address
                db_api.device_set_facts(context, device.id,
                                        {'pci_address': pci})
                view_dev['pci_address'] = pci
                view_dev['locator'] = found.to_primitive()
                locators[device.uuid] = view_dev['locator']
                devices.append(view_dev)
            attached = self.call_agent(
                context, host.name,
                'attaching devices on host %s' % host.name,
                self.agents.attach_devices, view, devices) or {}
            LOG.debug('Lease %(lease)s: devices attached on %(host)s',
                      {'lease': lease.uuid, 'host': host.name})
            for dev in devices:
                pci = attached.get(dev['uuid']) or dev['pci_address']
                db_api.device_set_facts(context, dev['id'],
                                        {'pci_address': pci})
                db_api.device_transition(context, dev['id'],
                                         states.DEVICE_ATTACH)
            details['devices'] = {d['uuid']: attached.get(d['uuid']) or
                                  d['pci_address'] for d in devices}
            details['locators'] = locators

        attached = (attachment.id, states.ATT_ATTACH_DONE,
                    {'details': details})
        if cxl and lease.extents:
            # Only now is the memory online on the host: counted there
            # from the attachment attached, before the lease is bound.
            db_api.attachment_transition(context, *attached)
            host_memory.grow(context, lease)
            return None
        return attached

    @staticmethod
    def _virtual_function(lease, device, host):
        """The agent's view of an SR-IOV virtual function to attach: the
        host creates it (on demand) or has it (pre-created); the agent
        finds it under its physical function."""
        # Checked when the bind was asked for; a bind resumed after a
        # takeover, or a pool changed since, meets the same rule here.
        refusal = rules.sriov_host_refusal(lease, host, pool=device.pool)
        if refusal:
            raise StepFailed('preparing: %s' % refusal)
        view = device_view(device)
        view['locator'] = locator_mod.Locator(
            vendor_id=device.vendor_id, product_id=device.product_id,
            fabric_ref=device.address).to_primitive()
        return view

    @staticmethod
    def _driver_locator(fabric, what, answer, **known):
        """A fabric driver's answer to a bind as a locator.Locator, its
        unknown fields taken from ``known``.

        A driver written against the older interface answers the
        locator's primitive (a dict): it is parsed as every locator is.
        """
        if not isinstance(answer, (dict, locator_mod.Locator)):
            LOG.error('Fabric driver %(driver)s answered a bind with '
                      '%(type)s, not a locator',
                      {'driver': fabric.driver,
                       'type': type(answer).__name__})
            raise StepFailed('%s: the fabric driver answered something that '
                             'is not a locator; see the conductor log'
                             % what)
        try:
            return locator_mod.Locator.from_primitive(answer).filled_from(
                **known)
        except locator_mod.InvalidLocator as exc:
            raise StepFailed('%s: the fabric driver answered a locator the '
                             'host cannot use: %s' % (what, exc))

    def _cxl_locators(self, lease, host):
        """{device name: locator} of the CXL memory devices holding the
        lease's chunks, each made reachable from ``host`` by the fabric
        (the local back end only checks the host is wired to it)."""
        return self.cxl_reach(lease, host, lease.extents)

    def cxl_reach(self, lease, host, extents):
        """{device name: locator} of the CXL memory devices holding
        ``extents`` (chunks of ``lease``), each made reachable from
        ``host`` by the fabric for the MiB of ``extents`` on it: all of
        the lease's at a bind, the new chunks of an elastic lease on a
        device it had none of when it grows."""
        fabric = lease.memory_pool.fabric
        fabric_row = _row(fabric)
        locators = {}
        sizes = {}
        for extent in extents:
            name = extent.memory_node.name
            sizes[name] = sizes.get(name, 0) + extent.size_mb
        for name in sorted(sizes):
            what = ('making CXL memory device %s reachable from host %s '
                    'on fabric %s' % (name, host.name, fabric.name))
            driver = self._fabric_driver(fabric_row, what)
            bind = getattr(driver, 'bind_memory', None)
            if bind is None:
                raise StepFailed('%s: fabric driver %s has no CXL memory; '
                                 'the pool must be on a fabric of driver '
                                 'cxl' % (what, fabric.driver))
            # The lease's MiB on the device: a fabric manager that
            # composes memory makes a chunk of exactly that.
            answer = self._call_fabric(fabric_row, what, bind, name,
                                       _row(host), sizes[name], lease.uuid)
            # Checked as every locator is; what is kept is the driver's
            # whole answer (a fabric manager's adds the chunk and the
            # connection it made, which its unbind needs), the host gets
            # the typed locator made of it.
            typed = self._driver_locator(fabric, what, answer)
            locators[name] = (answer if isinstance(answer, dict)
                              else typed.to_primitive())
        return locators

    @staticmethod
    def cxl_extent_views(lease, extents, locators):
        """The agent's views of CXL chunks ``extents`` of ``lease``, each
        with the typed locator of its device (``locators``: {device
        name: what cxl_reach kept})."""
        views = []
        for extent in extents:
            view = extent_view(lease, extent, credentials=True)
            view['locator'] = locator_mod.Locator.from_primitive(
                locators[view['device']]).to_primitive()
            views.append(view)
        return views

    def _unbind_cxl_memory(self, lease, host, details, devices=None):
        """Have the fabric take the lease's CXL memory from ``host``, once
        the host has destroyed (and erased) its regions; idempotent.
        ``devices``: only those (names; an elastic lease that shrank off
        them), default every device of the lease's chunks."""
        fabric = lease.memory_pool.fabric
        fabric_row = _row(fabric)
        locators = (details or {}).get('cxl_locators') or {}
        if devices is None:
            devices = {e.memory_node.name for e in lease.extents}
        for name in sorted(devices):
            what = ('taking CXL memory device %s from host %s on fabric %s'
                    % (name, host.name, fabric.name))
            driver = self._fabric_driver(fabric_row, what)
            unbind = getattr(driver, 'unbind_memory', None)
            if unbind is None:
                continue
            self._call_fabric(fabric_row, what, unbind, name, _row(host),
                              lease.uuid, locators.get(name))

    def _export(self, context, lease, extent, host):
        """Export one extent to the host's initiator; returns the portal.

        The credentials are stored before the agent is asked, so a resumed
        bind reuses them and a teardown knows the extent may be exported.
        """
        username, secret = extent.chap_username, extent.chap_secret
        if not (username and secret):
            username, secret = new_chap_credentials()
            db_api.extent_update(context, extent.id,
                                 {'chap_username': username,
                                  'chap_secret': secret})
            _mirror(extent, {'chap_username': username,
                             'chap_secret': secret})
        node = extent.memory_node.name
        result = self.call_agent(
            context, node,
            'exporting extent %d of the lease on memory node %s' %
            (extent.index, node),
            self.agents.export_extent, extent_view(lease, extent),
            host.initiator_iqn, username, secret) or {}
        values = {'target_iqn': result.get('target_iqn'),
                  'lun': result.get('lun')}
        state = db_api.extent_transition(context, extent.id,
                                         states.EXTENT_EXPORT, values)
        _mirror(extent, dict(values, export_state=state))
        return result.get('portal')

    def _attachment(self, context, lease, host, live=None):
        """The lease's attachment on ``host``, made attaching. ``live``:
        the lease's live attachments as the caller listed them under the
        reservation (None: list them)."""
        if live is None:
            live = db_api.attachment_list(
                context, lease.id, states_=states.LIVE_ATTACHMENT_STATES)
        for row in live:
            if row.host_id == host.id:
                db_api.attachment_transition(
                    context, row.id, states.ATT_ATTACH,
                    {'mode': lease.attach_mode,
                     'instance_uuid': lease.instance_uuid})
                return row
        return db_api.attachment_create(context, {
            'lease_id': lease.id, 'host_id': host.id,
            'instance_uuid': lease.instance_uuid,
            'mode': lease.attach_mode, 'state': states.ATT_ATTACHING,
            'details': {}})

    def _undo_failed_bind(self, task, unreachable):
        # What the bind marked of the devices (their bus addresses) is
        # read back: the detach names them so.
        lease = task.reload()
        problems = self.teardown(task, best_effort=True,
                                 skip_nodes=unreachable,
                                 abandon_skipped=True)
        if problems:
            LOG.warning('Lease %(lease)s: could not undo all of a failed '
                        'bind (%(problems)s); unbind or delete will finish '
                        'it.', {'lease': lease.uuid,
                                'problems': '; '.join(problems)})

    def _detach_from_silent_host(self, context, host, view, devices):
        """Ask a host that did not answer the attach of the lease's
        devices to let them go anyway, before the fabric unbinds them.

        Its agent may have died after the fabric composed the devices and
        be back by now, with functions on its bus it holds no record of;
        it finds them by their locators and removes them, so the fabric
        does not pull them from under the host. A host still silent is
        abandoned as before (one more wait for it)."""
        try:
            self.call_agent(context, host.name,
                            'detaching devices on host %s' % host.name,
                            self.agents.detach_devices, view,
                            [device_view(d) for d in devices])
        except StepFailed as exc:
            LOG.warning('Host %(host)s did not let the devices of a failed '
                        'bind go (%(exc)s); the fabric unbinds them all the '
                        'same', {'host': host.name, 'exc': exc.message})

    # ------------------------------------------------------------ teardown

    def teardown(self, task, best_effort=False, skip_nodes=(),
                 abandon_skipped=False, abandon_unreachable=False):
        """Undo every bind step whose mark is in the database, in reverse
        order: detach devices, fabric unbind, detach memory, unexport, on
        ``task.lease`` (the caller reads it again after what changed it).

        Strict mode raises the first StepFailed. Best-effort mode goes on
        after failures, skips nodes in ``skip_nodes`` (they did not
        answer), and returns what it could not undo; those marks stay.
        ``abandon_unreachable`` (best effort, a host known to be gone):
        a host that does not answer now is treated as one in
        ``skip_nodes`` with ``abandon_skipped``.

        ``abandon_skipped`` (undoing a failed bind): a host that did not
        answer never confirmed the attach. Its attachment is closed anyway
        once every export and fabric binding of the lease is gone, since
        nothing of the lease is then reachable from it; otherwise a dead
        host would keep the lease from ever being bound elsewhere.
        """
        context, lease = task.context, task.lease
        problems = []
        skip = set(skip_nodes)

        def attempt(fn, *args, **kwargs):
            try:
                fn(*args, **kwargs)
                return True
            except StepFailed as exc:
                if not best_effort:
                    raise
                problems.append(exc.message)
                if exc.unreachable and exc.node:
                    skip.add(exc.node)
                return False

        view = lease_view(lease)
        attachments = db_api.attachment_list(
            context, lease.id, states_=states.LIVE_ATTACHMENT_STATES)
        devices = list(lease.devices or [])
        extents = list(lease.extents or [])

        def on_host(host, fn, *args):
            # A step on the host itself. When its host is being abandoned,
            # the host not answering is no failure: what it held is cut off
            # by the unexport and fabric unbind that follow.
            done = attempt(fn, *args)
            return done or (abandon_unreachable and host.name in skip)

        # Hosts that may hold the lease's devices or memory.
        outcome = {}
        # SR-IOV virtual functions live on the host itself: no unexport or
        # fabric unbind cuts them off, only the host's agent lets them go.
        # A host that did not answer keeps its attachment of them (failed)
        # so that unbind or delete asks it again.
        # CXL memory too: the host's region maps the device until the
        # host itself destroys it, and a dead host's region is not
        # scrubbed, so its chunks must not go to anyone else.
        on_host_only = (any(sriov.is_sriov_pool(d.pool) for d in devices) or
                        (bool(extents) and media.is_cxl(lease.memory_pool)))
        for att in attachments:
            host = att.host
            abandoned = (abandon_skipped and host.name in skip and
                         not on_host_only)
            clean = True
            if att.state != states.ATT_DETACHING:
                db_api.attachment_transition(context, att.id,
                                             states.ATT_DETACH)
            if devices:
                if host.name not in skip:
                    clean &= on_host(
                        host, self.call_agent, context, host.name,
                        'detaching devices on host %s' % host.name,
                        self.agents.detach_devices, view,
                        [device_view(d) for d in devices])
                elif abandoned:
                    self._detach_from_silent_host(context, host, view,
                                                  devices)
                else:
                    clean = False
                # Never pull a device from under a host that still uses
                # it: fabric unbind only after the host let it go.
                if clean:
                    clean &= attempt(self._unbind_devices, context,
                                     devices, host)
            if extents:
                if host.name not in skip:
                    clean &= on_host(
                        host, self.call_agent, context, host.name,
                        'detaching the memory on host %s' % host.name,
                        self.agents.detach_memory, view,
                        [extent_view(lease, e) for e in extents],
                        att.mode, att.instance_uuid)
                elif not abandoned:
                    clean = False
                # The fabric takes CXL memory back only once the host
                # has let it go (its regions destroyed and erased).
                if clean and media.is_cxl(lease.memory_pool):
                    clean &= attempt(self._unbind_cxl_memory, lease, host,
                                     att.details)
            abandoned = abandoned or (abandon_unreachable and
                                      host.name in skip)
            outcome[att.id] = (host.name, clean, abandoned)

        # A lease that went to binding but has no host attachment may still
        # have devices bound on the fabric (the bind failed or stopped
        # between fabric bind and host attach, or a fabric call timed out
        # and finished late): unbind them all, it is idempotent.
        if not attachments and lease.host is not None and devices:
            attempt(self._unbind_devices, context, devices, lease.host)
        # CXL memory too: a fabric manager may have composed a chunk for
        # the lease before the bind failed (or finished it after the
        # conductor stopped waiting). No attachment means the host was
        # never asked to use it.
        if (not attachments and lease.host is not None and extents and
                media.is_cxl(lease.memory_pool)):
            attempt(self._unbind_cxl_memory, lease, lease.host, None)

        unexported = True
        for extent in extents:
            if not (extent.export_state == states.EXTENT_EXPORTED or
                    extent.chap_username):
                continue
            node = extent.memory_node.name
            if node in skip:
                problems.append('memory node %s did not answer' % node)
                unexported = False
                continue
            if attempt(self.call_agent, context, node,
                       'unexporting extent %d of the lease on memory node '
                       '%s' % (extent.index, node),
                       self.agents.unexport_extent,
                       extent_view(lease, extent)):
                db_api.extent_transition(context, extent.id,
                                         states.EXTENT_UNEXPORT,
                                         CLEAR_EXPORT)
            else:
                unexported = False

        for att_id, (host, clean, abandoned) in outcome.items():
            if abandoned:
                clean = clean and unexported
                if clean:
                    LOG.warning('Host %(host)s did not answer; closing its '
                                'attachment of lease %(lease)s, whose '
                                'exports and fabric bindings are all '
                                'removed.', {'host': host,
                                             'lease': lease.uuid})
            db_api.attachment_transition(
                context, att_id,
                states.ATT_DETACH_DONE if clean else states.ATT_DETACH_FAIL)
        return problems

    def _unbind_devices(self, context, devices, host):
        for device in devices:
            if sriov.is_sriov_pool(device.pool):
                # Released (and, on demand, removed) by the host's agent
                # at detach; the fabric never had it.
                db_api.device_transition(context, device.id,
                                         states.DEVICE_DETACH)
                db_api.device_set_facts(context, device.id,
                                        {'pci_address': None})
                continue
            fabric = device.pool.fabric
            fabric_row = _row(fabric)
            what = ('unbinding device %s from host %s on fabric %s' %
                    (device.uuid, host.name, fabric.name))
            driver = self._fabric_driver(fabric_row, what)
            self._call_fabric(fabric_row, what, driver.unbind_device,
                              device_view(device), _row(host))
            db_api.device_transition(context, device.id,
                                     states.DEVICE_DETACH)
            db_api.device_set_facts(context, device.id,
                                    {'pci_address': None})

    # ------------------------------------------------------------ unbind

    def unbind(self, task, action='unbind', keep_consumer=False,
               host_gone=False, advice=None):
        """Undo the lease's binding; the lease's new status.

        ``keep_consumer``: the lease stays linked to what it serves (its
        instance stopped, or moves), only its host is forgotten.

        ``host_gone``: the host the lease is bound to is down for good
        (e.g. Nova evacuates only from a compute service that is down). If it
        does not answer, its attachment is let go of once every export and
        fabric binding of the lease is gone -- nothing of the lease can
        reach it then -- as after a failed bind. Any other failure still
        fails the unbind.
        """
        context, lease = task.context, task.lease
        if lease.status != states.UNBINDING:
            LOG.info('Lease %(lease)s is %(status)s, not unbinding.',
                     {'lease': lease.uuid, 'status': lease.status})
            return lease.status
        advice = advice or (' Unbind it again once that is fixed, or delete '
                            'it.')
        try:
            if not host_gone:
                # A host that is gone has no guests left to protect.
                self._take_host_memory_back(context, lease)
            if host_gone:
                host_memory.drop_hold(context, lease)
                self._teardown_from_gone_host(task)
            else:
                self.teardown(task)
        except Exception as exc:
            host_memory.give_back(context, lease)
            fault = self._fault('Unbinding', exc, lease, advice)
            return task.finish(states.FAIL, action, fault=fault)
        values = {'host_id': None}
        if not keep_consumer:
            values['instance_uuid'] = None
        return task.finish(states.DONE, action, values=values)

    @staticmethod
    def _take_host_memory_back(context, lease):
        """Lower the host's MEMORY_MB before its CXL memory goes, or
        refuse when instances use it. The unbind and delete requests did
        it already (409 at the API); an expiry or Nova's release of the
        lease has it done here."""
        try:
            host_memory.take_back(context, lease)
        except (exception.Conflict, exception.ServiceUnavailable) as exc:
            raise StepFailed('taking CXL memory off its host: %s' %
                             exc.message.replace('Conflict: ', '', 1))

    def _teardown_from_gone_host(self, task):
        context = task.context
        problems = self.teardown(task, best_effort=True,
                                 abandon_unreachable=True)
        live = db_api.attachment_list(context, task.lease_id,
                                      states_=states.LIVE_ATTACHMENT_STATES)
        lease = task.reload()
        exported = [e for e in lease.extents or []
                    if e.export_state == states.EXTENT_EXPORTED or
                    e.chap_username]
        if live or exported:
            raise StepFailed('; '.join(problems) or
                             'the binding could not be undone')
        if problems:
            LOG.warning('Lease %(lease)s: let go of its host, which is gone '
                        '(%(problems)s)', {'lease': lease.uuid,
                                           'problems': '; '.join(problems)})

    # ------------------------------------------------------------ release

    def release(self, task, action='delete'):
        """Tear down, scrub and give back the task's lease: releasing ->
        released, or error with the failed step as the fault; the lease's
        new status."""
        context, lease_id, lease = task.context, task.lease_id, task.lease
        if lease.status != states.RELEASING:
            LOG.info('Lease %(lease)s is %(status)s, not releasing.',
                     {'lease': lease.uuid, 'status': lease.status})
            return lease.status
        try:
            self._take_host_memory_back(context, lease)
            self.teardown(task)
            # The teardown's marks (nothing exported any more) decide
            # what is scrubbed.
            lease = task.reload()
            self._scrub(context, lease)
            db_api.lease_forget_binding(context, lease_id,
                                        expected_status=states.RELEASING)
            allocator.release_capacity(context, lease_id)
            task.mark_stale()
        except Exception as exc:
            host_memory.give_back(context, lease)
            fault = self._fault('Releasing', exc, lease,
                                ' Delete the lease again once that is '
                                'fixed; until then it keeps its capacity.')
            return task.finish(states.FAIL, action, fault=fault)
        if placement_claims.enabled():
            placement_claims.release(lease.uuid)
        db_api.action_finish(context, lease_id, action, 'success')
        return states.RELEASED

    def _scrub(self, context, lease):
        for extent in lease.extents:
            if extent.export_state == states.EXTENT_SCRUBBED:
                continue
            if (extent.export_state == states.EXTENT_ALLOCATED and
                    not extent.chap_username):
                # Never handed to its memory node (credentials are stored
                # before the first export call): no file, nothing to
                # scrub, and no reason to wait for that node's agent.
                continue
            node = extent.memory_node.name
            self.call_agent(
                context, node,
                'scrubbing extent %d of the lease on memory node %s' %
                (extent.index, node),
                self.agents.scrub_extent, extent_view(lease, extent))
            db_api.extent_transition(context, extent.id, states.EXTENT_SCRUB,
                                     CLEAR_EXPORT)
