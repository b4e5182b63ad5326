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

"""The MEMORY_MB inventory of a compute node whose host holds CXL memory.

A lease of a CXL pool bound in host mode is onlined on its host as a NUMA
node: the host's MemTotal grows, and nova-compute's libvirt driver
reports MemTotal as the total of the compute node provider's MEMORY_MB
at its next ``update_available_resource`` periodic run. composable moves
that total at once, in the safe order:

* grow: after the host's agent onlined the memory (never advertise memory
  that is not there yet);
* take back: before the agent offlines it, in one compare-and-swap on
  the provider's generation: read the inventory and the usage (both
  carry the generation), check the usage still fits without the lease
  (composable.conductor.rules.check_cxl_unbind), and lower the total
  with that generation. An allocation that lands between the read and
  the write moves the generation, so the write fails with
  ``placement.concurrent_update`` and the check runs again on the new
  usage; an allocation after the write is checked by Placement against
  the lowered total. (Placement accepts a total below the usage, so the
  check must precede the write: lowering alone refuses nothing that is
  already allocated.)
* give back: when the unbind failed and the memory is still online.

Nova converges to the same figure: its report client writes MEMORY_MB
only when what it computes (MemTotal) differs from what it last wrote or
read, and then with the generation it knows, which composable's writes
have moved; the conflict makes it read the provider again before
writing. See doc/source/admin/cxl-memory.rst.

A lease bound in virtio-mem mode onlines its region on the host too, but
for one guest: MemTotal grows the same, and the memory is that guest's.
composable counts it the same way and holds it: an allocation of
MEMORY_MB = the lease's size on the compute node provider, by a consumer
of its own (``hold_consumer``: derived from the lease's UUID, never the
lease's consumer, whose allocations claims.py writes whole and would
wipe out), so the memory Nova's scheduler sees free is unchanged. Every
step keeps Placement from offering more than is free:

* count: the hold first when the node has room for it, then the total
  (free shrinks for a moment, never grows); on a node too full for the
  hold, the total first and the hold at once after it (a scheduler
  allocation landing between the two writes could take the room);
* take back: lower the total (the check leaves out the lease's own
  hold: it is not an instance's), then delete the hold;
* give back: count again.

The reconcile pass (sync.py) reads only the providers of pools, so it
never meets the hold on a compute node provider.

The attachment of the lease records what was done (``details``):
``host_memory_mb`` once the bind counted the memory on the host,
``host_memory_taken`` once an unbind lowered the total, so an unbind
that the API checked is not lowered twice and a failed one is given
back once.
"""

import uuid as uuid_lib

from oslo_log import log as logging

from composable.common import exception
from composable.common import media
from composable.common import states
from composable.conductor.placement import claims as placement_claims
from composable.conductor.placement import client as pclient
from composable.conductor.placement import sync
from composable.conductor import rules
from composable.db import api as db_api

LOG = logging.getLogger(__name__)

MEMORY_MB = 'MEMORY_MB'
COUNTED = 'host_memory_mb'
TAKEN = 'host_memory_taken'
# Modes whose CXL memory is onlined on the host, growing MemTotal.
HOST_MEMORY_MODES = (states.ATTACH_HOST, states.ATTACH_VIRTIO_MEM)
_HOLD_NAME = 'composable virtio-mem hold'


def hold_consumer(lease):
    """The Placement consumer holding a virtio-mem lease's memory on its
    compute node: the same UUID for the same lease, in every conductor."""
    return str(uuid_lib.uuid5(uuid_lib.UUID(lease.uuid), _HOLD_NAME))


def host_attachment(context, lease):
    """The live host-mode (or virtio-mem) attachment of a CXL lease whose
    memory a bind onlined on the host (``COUNTED`` in its details, or
    attached by a bind made before composable counted it: Nova's
    periodic run has); None otherwise."""
    if not lease.memory_mb or not media.is_cxl(lease.memory_pool):
        return None
    for att in db_api.attachment_list(
            context, lease.id, states_=states.LIVE_ATTACHMENT_STATES):
        if att.mode in HOST_MEMORY_MODES and (
                (att.details or {}).get(COUNTED) or
                att.state == states.ATT_ATTACHED):
            return att
    return None


def _mark(context, att, **values):
    def change(details):
        for key, value in values.items():
            if value is None:
                details.pop(key, None)
            else:
                details[key] = value
        return details

    # On the details as they are when written: a report of the host
    # noted meanwhile is kept.
    db_api.attachment_change_details(context, att.id, change)


def _compute_node(client, host):
    """The compute node provider of ``host``; None when Placement has
    none (no nova-compute on it)."""
    name = sync.compute_node_name(host)
    provider = client.get_provider_by_name(name)
    if provider is None:
        LOG.info('Host %(host)s has no compute node resource provider '
                 '%(name)s in Placement; its MEMORY_MB is not composable\'s '
                 'to follow', {'host': host.name, 'name': name})
    return provider


def _read(client, uuid):
    """(generation, MEMORY_MB inventory or None, MEMORY_MB used) read so
    that the three belong together: the usage is read after the
    inventory and both name the same generation, or it is read again."""
    for _attempt in range(client.retries + 1):
        generation, inventories = client.get_inventories(uuid)
        got = client._call('GET', '/resource_providers/%s/usages' % uuid,
                           pclient.MV_INVENTORY)
        if got.get('resource_provider_generation') == generation:
            return (generation, inventories.get(MEMORY_MB),
                    int(got['usages'].get(MEMORY_MB, 0)))
    raise pclient.GenerationConflict(
        status=409, error_code=pclient.CONCURRENT_UPDATE,
        what='usage of provider %s' % uuid, attempts=client.retries + 1)


def _write_total(client, uuid, generation, inventory, total):
    body = dict(inventory, total=total,
                resource_provider_generation=generation)
    if inventory.get('max_unit') == inventory['total']:
        # Nova's libvirt driver lets one instance take all of it
        # (max_unit = total): keep to that, so that Nova finds nothing
        # to change once it computes the same total.
        body['max_unit'] = total
    client._call('PUT', '/resource_providers/%s/inventories/%s' %
                 (uuid, MEMORY_MB), pclient.MV_INVENTORY, body=body)


def _change(client, provider, delta, check=None):
    """Add ``delta`` MiB to the total of the provider's MEMORY_MB, after
    ``check(inventory, used)`` on the figures the write is conditional
    on; (old total, new total), or None when it has no MEMORY_MB."""
    uuid = provider['uuid']

    def attempt():
        generation, inventory, used = _read(client, uuid)
        if inventory is None:
            return None
        if check is not None:
            check(inventory, used)
        old = int(inventory['total'])
        # Placement wants total >= 1 and reserved <= total.
        new = max(old + delta, int(inventory.get('reserved') or 0), 1)
        if new != old:
            _write_total(client, uuid, generation, inventory, new)
        return old, new
    return client._retrying('MEMORY_MB of provider %s' % uuid, attempt)


def _held(client, uuid, lease):
    """MiB of MEMORY_MB the lease's hold has on provider ``uuid``."""
    got = client.get_allocations(hold_consumer(lease))['allocations']
    return int(got.get(uuid, {}).get('resources', {}).get(MEMORY_MB, 0))


def _hold(client, uuid, lease, size_mb=None):
    client.put_allocations(hold_consumer(lease),
                           {uuid: {MEMORY_MB: (lease.memory_mb
                                               if size_mb is None
                                               else size_mb)}},
                           lease.project_id, lease.user_id)


def _release_hold(client, lease, name):
    try:
        client.delete_allocations(hold_consumer(lease))
    except pclient.PlacementError as exc:
        raise exception.ServiceUnavailable(
            reason='could not delete the allocation holding the CXL '
                   'memory of lease %s on compute node %s: %s; try again '
                   'when Placement answers' % (lease.uuid, name, exc))


def _count(client, provider, lease, att):
    """Count the lease's memory in the provider's MEMORY_MB and, in
    virtio-mem mode, hold it for the lease's guest; what _change
    returned."""
    if att.mode != states.ATTACH_VIRTIO_MEM:
        return _change(client, provider, lease.memory_mb)
    uuid = provider['uuid']
    try:
        # Hold first: free memory shrinks until the total grows.
        _hold(client, uuid, lease)
    except pclient.GenerationConflict:
        raise
    except pclient.PlacementError as exc:
        if exc.status != 409:
            raise
        # No room for the hold before the memory is counted.
        moved = _change(client, provider, lease.memory_mb)
        _hold(client, uuid, lease)
        return moved
    return _change(client, provider, lease.memory_mb)


def grow(context, lease):
    """After a bind onlined the lease's CXL memory on its host: count it
    in the host's MEMORY_MB, once. Never fails the bind: Nova's periodic
    run counts it too, a minute later at most."""
    if not lease.memory_mb or not media.is_cxl(lease.memory_pool):
        return
    att = None
    for row in db_api.attachment_list(context, lease.id,
                                      states_=[states.ATT_ATTACHED]):
        if row.mode in HOST_MEMORY_MODES:
            att = row
    if att is None or (att.details or {}).get(COUNTED):
        # Counted by the bind that made this attachment; the agent kept
        # the region, so the host has no more memory than then.
        return
    _mark(context, att, **{COUNTED: lease.memory_mb})
    if not placement_claims.enabled():
        return
    try:
        client = placement_claims.get_client()
        provider = _compute_node(client, att.host)
        if provider is None:
            return
        moved = _count(client, provider, lease, att)
    except exception.ComposableException as exc:
        LOG.warning('Lease %(lease)s: could not add its %(mb)d MiB to the '
                    'MEMORY_MB of compute node %(host)s (%(exc)s); '
                    'nova-compute adds them at its next periodic run',
                    {'lease': lease.uuid, 'mb': lease.memory_mb,
                     'host': att.host.name, 'exc': exc})
        return
    if moved:
        LOG.info('Lease %(lease)s: MEMORY_MB of compute node %(host)s '
                 'from %(old)d to %(new)d MiB',
                 {'lease': lease.uuid, 'host': att.host.name,
                  'old': moved[0], 'new': moved[1]})


def _live_counted(context, lease):
    """The live attachment of ``lease`` whose memory a bind counted on
    its host (attached, in a mode that onlines it there), or None."""
    for row in db_api.attachment_list(context, lease.id,
                                      states_=[states.ATT_ATTACHED]):
        if row.mode in HOST_MEMORY_MODES and row.host_id == lease.host_id:
            return row
    return None


def follow(context, lease, size_mb):
    """An elastic CXL lease was resized on its host: make the host's
    MEMORY_MB, and in virtio-mem mode the hold of the lease's guest,
    count ``size_mb`` MiB of it (what the attachment says was counted,
    ``COUNTED``, is the starting point, so a second call with the same
    size changes nothing; a settle that undoes a grow calls it with the
    old size whether or not the grow got this far).

    In the safe order, as at bind and unbind: more memory (after the
    host's agent onlined it) is held first and counted after (total
    first on a node too full for the hold); less (after the agent took
    it out of the guest and off the host) is uncounted first, and the
    hold lowered after. Each total is written with the provider's
    generation (_change). Raises ServiceUnavailable when Placement does
    not take it, after putting back what it changed; COUNTED then keeps
    the size it had."""
    att = _live_counted(context, lease)
    if att is None or not media.is_cxl(lease.memory_pool):
        return None
    counted = (att.details or {}).get(COUNTED)
    if counted is None:
        # Counted by nova-compute only (a bind older than COUNTED): the
        # host's total follows MemTotal at its next periodic run.
        counted = size_mb
    delta = int(size_mb) - int(counted)
    if not delta:
        return None
    virtio = att.mode == states.ATTACH_VIRTIO_MEM
    moved = None
    if placement_claims.enabled():
        client = placement_claims.get_client()
        name = sync.compute_node_name(att.host)
        try:
            provider = _compute_node(client, att.host)
        except exception.ComposableException as exc:
            raise _unavailable(lease, name, delta, exc)
        if provider is not None:
            moved = _follow(client, provider, lease, name, virtio,
                            int(counted), int(size_mb))
    _mark(context, att, **{COUNTED: int(size_mb)})
    if moved:
        LOG.info('Lease %(lease)s resized: MEMORY_MB of compute node '
                 '%(host)s from %(old)d to %(new)d MiB',
                 {'lease': lease.uuid, 'host': att.host.name,
                  'old': moved[0], 'new': moved[1]})
    return moved


def _unavailable(lease, name, delta, exc):
    return exception.ServiceUnavailable(
        reason='could not %s the MEMORY_MB of compute node %s by the %d '
               'MiB lease %s %s: %s' % (
                   'raise' if delta > 0 else 'lower', name, abs(delta),
                   lease.uuid, 'grew by' if delta > 0 else 'shrank by',
                   exc))


def _follow(client, provider, lease, name, virtio, old_mb, new_mb):
    uuid = provider['uuid']
    delta = new_mb - old_mb
    if delta > 0:
        if not virtio:
            try:
                return _change(client, provider, delta)
            except exception.ComposableException as exc:
                raise _unavailable(lease, name, delta, exc)
        held_first = True
        try:
            _hold(client, uuid, lease, new_mb)
        except exception.ComposableException as exc:
            if getattr(exc, 'status', None) != 409 or isinstance(
                    exc, pclient.GenerationConflict):
                raise _unavailable(lease, name, delta, exc)
            held_first = False
        try:
            moved = _change(client, provider, delta)
            if not held_first:
                _hold(client, uuid, lease, new_mb)
            return moved
        except exception.ComposableException as exc:
            # Put back what was changed: the hold (and the total, when
            # it moved) as they were.
            try:
                if not held_first:
                    _change(client, provider, -delta)
                _hold(client, uuid, lease, old_mb)
            except exception.ComposableException as undo:
                LOG.warning('Lease %(lease)s: could not put the hold of '
                            'its guest on compute node %(host)s back to '
                            '%(mb)d MiB (%(exc)s)',
                            {'lease': lease.uuid, 'host': name,
                             'mb': old_mb, 'exc': undo})
            raise _unavailable(lease, name, delta, exc)
    # Less: the memory has left the guest and the host already.
    try:
        moved = _change(client, provider, delta)
    except exception.ComposableException as exc:
        raise _unavailable(lease, name, delta, exc)
    if virtio:
        try:
            _hold(client, uuid, lease, new_mb)
        except exception.ComposableException as exc:
            # Holds more than the guest has: nobody else gets that
            # memory until the hold is written again (the next resize,
            # or the unbind, which deletes it).
            LOG.warning('Lease %(lease)s: could not lower the hold of its '
                        'guest on compute node %(host)s to %(mb)d MiB '
                        '(%(exc)s)', {'lease': lease.uuid, 'host': name,
                                      'mb': new_mb, 'exc': exc})
    return moved


def take_back(context, lease):
    """Before an unbind (or a release) takes the lease's CXL memory off
    its host: refuse it (Conflict, 409, with the numbers) when instances
    use that memory, else lower the host's MEMORY_MB at once. Nothing is
    changed when it refuses. Idempotent: an unbind already taken back is
    not lowered again."""
    att = host_attachment(context, lease)
    if att is None or not placement_claims.enabled():
        return
    client = placement_claims.get_client()
    host = att.host
    name = sync.compute_node_name(host)
    virtio = att.mode == states.ATTACH_VIRTIO_MEM
    if (att.details or {}).get(TAKEN):
        if virtio:
            # Lowered by an earlier attempt that may have stopped before
            # the hold went.
            _release_hold(client, lease, name)
        return

    try:
        provider = _compute_node(client, host)
        if provider is None:
            return

        def check(inventory, used):
            if virtio:
                # The guest's memory, held by the lease itself: no
                # instance needs it. A hold changed since ``used`` was
                # read moved the generation: the write then conflicts.
                used -= _held(client, provider['uuid'], lease)
            rules.check_cxl_unbind(lease, name, inventory, used)

        moved = _change(client, provider, -lease.memory_mb, check=check)
    except pclient.PlacementError as exc:
        # Without the numbers the memory is not taken: the guests using
        # it cannot be known.
        raise exception.ServiceUnavailable(
            reason='cannot check that no instance on compute node %s uses '
                   'the CXL memory of lease %s: %s; try again when '
                   'Placement answers' % (name, lease.uuid, exc))
    # Marked before the hold goes: an unbind failing from here on has
    # give_back count the memory, and write the hold, again.
    _mark(context, att, **{TAKEN: True, COUNTED: lease.memory_mb})
    if virtio:
        try:
            _release_hold(client, lease, name)
        except exception.ServiceUnavailable:
            # The unbind is refused: the guest keeps its memory, so the
            # total gets it back (the hold is still there).
            give_back(context, lease)
            raise
    if moved:
        LOG.info('Lease %(lease)s: MEMORY_MB of compute node %(host)s '
                 'from %(old)d to %(new)d MiB before its CXL memory is '
                 'taken off', {'lease': lease.uuid, 'host': name,
                               'old': moved[0], 'new': moved[1]})


def drop_hold(context, lease):
    """The lease's host is gone for good (Nova evacuates from it): its
    guest, and the memory, went with it. Delete the virtio-mem hold, best
    effort (logged), so the compute node provider holds nothing of a
    lease that left; its total is left as for host mode (nova-compute
    sets it from MemTotal when the host comes back)."""
    att = host_attachment(context, lease)
    if (att is None or att.mode != states.ATTACH_VIRTIO_MEM or
            not placement_claims.enabled()):
        return
    try:
        placement_claims.get_client().delete_allocations(
            hold_consumer(lease))
    except exception.ComposableException as exc:
        LOG.warning('Lease %(lease)s: could not delete the allocation '
                    '%(consumer)s holding its memory on compute node '
                    '%(host)s, which is gone (%(exc)s); delete it with '
                    '"openstack resource provider allocation delete '
                    '%(consumer)s"', {'lease': lease.uuid,
                                      'consumer': hold_consumer(lease),
                                      'host': att.host.name, 'exc': exc})


def give_back(context, lease):
    """The unbind that took back the MEMORY_MB did not take the memory:
    count it again. Best effort (logged): Nova's next periodic run sets
    MEMORY_MB from MemTotal only when MemTotal changes."""
    att = host_attachment(context, lease)
    if att is None or not (att.details or {}).get(TAKEN):
        return
    try:
        if placement_claims.enabled():
            client = placement_claims.get_client()
            provider = _compute_node(client, att.host)
            if provider is not None:
                _count(client, provider, lease, att)
    except exception.ComposableException as exc:
        LOG.warning('Lease %(lease)s: could not give the MEMORY_MB of '
                    'compute node %(host)s its %(mb)d MiB back (%(exc)s); '
                    'restarting nova-compute there makes it report '
                    'MemTotal again', {'lease': lease.uuid,
                                       'host': att.host.name,
                                       'mb': lease.memory_mb, 'exc': exc})
        return
    _mark(context, att, **{TAKEN: None})
