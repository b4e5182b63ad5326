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

"""Sample notifications, built from the real notification objects and
example rows: the source of the samples in the documentation
(doc/notification_samples/), which a unit test compares with what this
module builds, and ``python -m composable.notifications.samples DIR``
writes."""

import datetime
import json
import os
import sys
import types

from composable.notifications.objects import base
from composable.notifications.objects import device as device_objects
from composable.notifications.objects import lease as lease_objects
from composable.notifications.objects import pool as pool_objects

SAMPLE_DIR = os.path.join('doc', 'notification_samples')

_PUBLISHER = base.NotificationPublisher(host='controller-1',
                                        source='composable-conductor')
_FABRIC = types.SimpleNamespace(uuid='8c1c3a8e-2f64-4a0e-9f1c-5f2b8a4e6d21',
                                name='rack-1-pcie')
_MEMORY_POOL = types.SimpleNamespace(
    uuid='1b7e2c53-0e55-4a2c-8b55-2f0c5a3d9e10', name='rack-1-memory',
    kind='memory', resource_class='CUSTOM_COMPOSABLE_MEMORY_MB',
    total=262144, reserved=8192, used=16384, step_size=1024,
    provider_uuid='6f0d0c57-75a3-4f1e-93f4-9c1f3d1b5a77', fabric=_FABRIC,
    medium='network')
_GPU_POOL = types.SimpleNamespace(
    uuid='d2a9c4b1-7e3f-4c8a-a1d6-3b5e9f2c7a40', name='rack-1-gpus',
    kind='gpu', resource_class='CUSTOM_COMPOSABLE_GPU', total=8, reserved=0,
    used=2, step_size=1, provider_uuid='0a6e5b2c-91d4-4f37-8c2e-4d7a1f6b3c95',
    fabric=_FABRIC)
_DEVICE = types.SimpleNamespace(
    uuid='5e3f7a21-4c9b-4d8e-b6a2-1f0c9d8e7b63', name=None,
    address='/redfish/v1/CompositionService/ResourceBlocks/GPU3',
    kind='gpu', vendor_id='10de', product_id='20b5', model='A100-80G',
    state='attached', pool=_GPU_POOL)
_HOST = types.SimpleNamespace(name='compute-7')
_CREATED = datetime.datetime(2026, 11, 25, 9, 30, 0)


def _lease(status, host=None, fault=None, devices=1):
    return types.SimpleNamespace(
        uuid='a4f9e1c2-3b7d-4e8f-9a6c-0d2b5e8f1c34', name='training-run',
        project_id='6f8e2f6d1c4b4a7e9d3c2b1a0f9e8d7c',
        user_id='2b9c7d4e6f1a4c3b8e5d0a9f7c6b5a4e', status=status,
        memory_mb=16384, device_count=1, device_kind='gpu',
        device_model='A100-80G', attach_mode='host',
        instance_uuid='c7d1e9a3-5b2f-4c8d-9e6a-1f3b7d5c9e20',
        start_at=None, end_at=datetime.datetime(2026, 11, 26, 9, 30, 0),
        created_at=_CREATED, fault=fault, host=host,
        memory_pool=_MEMORY_POOL, device_pool=_GPU_POOL,
        devices=[_DEVICE] * devices)


_BIND_FAULT = ('Binding failed while exporting extent 0 of the lease on '
               'memory node memory-2: composable-agent on memory-2 did not '
               'answer within 120 s. Bind the lease again once that is '
               'fixed, or unbind or delete it.')
_CREATE_FAULT = ('No pool can give 16384 MiB now: rack-1-memory has 8192 '
                 'MiB free. Delete leases you no longer need, relax the '
                 'model or traits, or try again later.')

# event type: (lease status, host, fault, devices held)
_LEASE_SAMPLES = {
    'lease.create.start': ('reserved', None, None, 1),
    'lease.create.end': ('reserved', None, None, 1),
    'lease.create.error': ('alloc_failed', None, _CREATE_FAULT, 0),
    'lease.allocate.start': ('allocating', None, None, 0),
    'lease.allocate.end': ('reserved', None, None, 1),
    'lease.allocate.error': ('alloc_failed', None, _CREATE_FAULT, 0),
    'lease.bind.start': ('binding', _HOST, None, 1),
    'lease.bind.end': ('bound', _HOST, None, 1),
    'lease.bind.error': ('bind_failed', _HOST, _BIND_FAULT, 1),
    'lease.unbind.start': ('unbinding', _HOST, None, 1),
    'lease.unbind.end': ('reserved', None, None, 1),
    'lease.unbind.error': ('error', _HOST, 'Unbinding failed while '
                           'detaching devices on host compute-7: ...', 1),
    'lease.delete.start': ('releasing', None, None, 1),
    'lease.delete.end': ('released', None, None, 0),
    'lease.delete.error': ('error', None, 'Releasing failed while '
                           'scrubbing extent 0 of the lease on memory node '
                           'memory-2: ...', 1),
    'lease.expire': ('released', None, None, 0),
    'lease.resize.start': ('bound', _HOST, None, 1),
    'lease.resize.end': ('bound', _HOST, None, 1),
    'lease.resize.error': ('bound', _HOST, 'Growing from 2048 to 4096 MiB: '
                           'predicted peak 3300 MiB over the next 300 s '
                           '(autoregressive order 4 on 60 samples), plus '
                           '20% headroom. Kept at 2048 MiB: pool memory-pool '
                           'has 1024 MiB free, 2048 MiB more were asked '
                           'for.', 1),
    'lease.restore.start': ('bound', _HOST, None, 1),
    'lease.restore.end': ('bound', _HOST, None, 1),
    'lease.restore.error': ('bound', _HOST, 'After host compute-7 '
                            'restarted, its agent could not bind these '
                            'devices of the lease to vfio-pci again, so its '
                            'instance cannot use them: device '
                            '5e3f7a21-4c9b-4d8e-b6a2-1f0c9d8e7b63 at '
                            '0000:41:00.0: no PCI function with ids '
                            '10de:20b5 appeared within 1 s (1 rescans). '
                            'Unbind the lease (the host then removes what '
                            'is left of them) and bind it again.', 1),
}


def _message(notification):
    """What a consumer receives, as oslo.messaging's messagingv2 driver
    sends it (without its message_id and timestamp)."""
    return {'priority': notification.priority.upper(),
            'event_type': notification.event_type.to_event_type(),
            'publisher_id': notification.publisher.publisher_id(),
            'payload': notification.payload_primitive()}


def build():
    """{event type: sample message}."""
    samples = {}
    for event_type, (status, host, fault, held) in _LEASE_SAMPLES.items():
        parts = event_type.split('.')
        phase = parts[2] if len(parts) > 2 else None
        lease = _lease(status, host=host, fault=fault, devices=held)
        samples[event_type] = _message(lease_objects.LeaseNotification(
            priority=(base.PRIORITY_ERROR if phase == base.PHASE_ERROR
                      else base.PRIORITY_INFO),
            publisher=_PUBLISHER,
            event_type=base.EventType(parts[0], parts[1], phase),
            payload=lease_objects.LeasePayload(lease)))
    faulty = types.SimpleNamespace(**dict(vars(_DEVICE), state='faulty'))
    samples['device.health'] = _message(
        device_objects.DeviceHealthNotification(
            priority=base.PRIORITY_ERROR, publisher=_PUBLISHER,
            event_type=base.EventType(base.OBJECT_DEVICE,
                                      base.ACTION_HEALTH),
            payload=device_objects.DeviceHealthPayload(
                faulty,
                previous_state='available', health='critical',
                reason='reported unhealthy by the fabric; taken out of '
                       'service')))
    samples['pool.update'] = _message(pool_objects.PoolNotification(
        priority=base.PRIORITY_INFO, publisher=_PUBLISHER,
        event_type=base.EventType(base.OBJECT_POOL, base.ACTION_UPDATE),
        payload=pool_objects.PoolPayload(_MEMORY_POOL)))
    return samples


def render(sample):
    return json.dumps(sample, indent=4, sort_keys=True) + '\n'


def write(directory=SAMPLE_DIR):
    os.makedirs(directory, exist_ok=True)
    for event_type, sample in build().items():
        with open(os.path.join(directory, event_type + '.json'), 'w') as f:
            f.write(render(sample))


if __name__ == '__main__':
    write(*sys.argv[1:2])
