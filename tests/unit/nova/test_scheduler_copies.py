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

"""The Nova-side plugins import nothing of the service, so they keep
copies of its names: the copies must match the originals."""

from composable.common import resource_classes
from composable.common import states
from composable.nova import extra_specs
from composable.nova import scheduler


def test_scheduler_lease_states_are_the_service_states():
    assert scheduler.RESERVED == states.RESERVED
    assert scheduler.BOUND_STATES == {states.BINDING, states.BOUND}


def test_scheduler_device_names_are_the_service_names():
    assert scheduler.GPU_CLASS == resource_classes.GPU
    assert scheduler.PCI_CLASS_PREFIX == resource_classes.PCI_PREFIX
    assert scheduler.DEVICE_AVAILABLE == states.DEVICE_AVAILABLE


def test_attach_modes_of_the_extra_spec_are_the_service_modes():
    """All but virtio-mem, which needs a domain with <maxMemory> room that
    Nova never writes (doc/source/admin/cxl-memory.rst)."""
    spec, = [v for v in extra_specs.EXTRA_SPEC_VALIDATORS
             if v.name == 'composable:attach_mode']
    assert tuple(spec.value['enum']) == tuple(
        m for m in states.ATTACH_MODES if m != states.ATTACH_VIRTIO_MEM)
