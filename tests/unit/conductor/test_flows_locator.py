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

"""The locator on the bind path: the fabric driver's answer, filled in
from the device's row, sent to the agent and stored in the attachment as
its one primitive form (composable.common.locator); a driver of the older
interface (a dict) still works, a bad answer fails the bind with the
field it got wrong. Real conductor and agent RPC servers, fake fabric."""

import dataclasses

from composable.agent.compute_node import backends
from composable.common import locator
from composable.common import states
from composable.db import api as db_api
from composable.fabric import fake
from tests.unit.conductor import harness as h_mod


def _bind(harness, **values):
    uuid = harness.create(device_count=1, **values)
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           harness.hosts['compute-0'].uuid)
    return uuid


def _sent_to_agent(monkeypatch):
    """The device views the compute agent is asked to attach."""
    sent = []
    attach = backends.SimulatedDevices.attach

    def recording(self, lease, devices):
        sent.extend(devices)
        return attach(self, lease, devices)

    monkeypatch.setattr(backends.SimulatedDevices, 'attach', recording)
    return sent


def test_the_locator_goes_to_the_agent_and_into_the_attachment(
        harness, monkeypatch):
    sent = _sent_to_agent(monkeypatch)
    # The sync stored the device's ids and serial; the fake fabric's
    # bind answers the bus address and its reference only.
    for device in harness.devices:
        db_api.device_set_facts(h_mod.admin(), device.id, {
            'vendor_id': '10de', 'product_id': '2330',
            'serial': '0011223344556677'})
    uuid = _bind(harness)
    lease = harness.wait(uuid, states.BOUND)
    device = lease.devices[0]
    expected = locator.Locator(
        vendor_id='10de', product_id='2330', serial='0011223344556677',
        pci_address=fake.fake_pci_address({'address': device.address}),
        fabric_ref=device.address).to_primitive()
    assert [d['locator'] for d in sent] == [expected]
    assert sent[0]['pci_address'] == expected['pci_address']
    attachment = db_api.attachment_list(h_mod.admin(), lease.id)[0]
    assert attachment.details['locators'] == {device.uuid: expected}
    assert device.pci_address == expected['pci_address']


def test_what_the_driver_answers_wins_over_the_row(harness, monkeypatch):
    sent = _sent_to_agent(monkeypatch)
    bind = fake.FakeFabricDriver.bind_device

    def with_serial(self, fabric, device, host):
        return dataclasses.replace(bind(self, fabric, device, host),
                                   serial='S9')

    monkeypatch.setattr(fake.FakeFabricDriver, 'bind_device', with_serial)
    for device in harness.devices:
        db_api.device_set_facts(h_mod.admin(), device.id,
                                {'serial': 'ROW-SERIAL'})
    harness.wait(_bind(harness), states.BOUND)
    assert sent[0]['locator']['serial'] == 'S9'


def test_a_driver_answering_the_older_dict_still_binds(harness,
                                                       monkeypatch):
    sent = _sent_to_agent(monkeypatch)

    def old_driver(self, fabric, device, host):
        return {'vendor_id': '0x10DE', 'product_id': '2330',
                'pci_address': '0000:41:00.0'}

    monkeypatch.setattr(fake.FakeFabricDriver, 'bind_device', old_driver)
    lease = harness.wait(_bind(harness), states.BOUND)
    assert sent[0]['locator'] == {
        'vendor_id': '10de', 'product_id': '2330', 'serial': None,
        'pci_address': '0000:41:00.0',
        'fabric_ref': lease.devices[0].address}


def test_a_bad_locator_fails_the_bind_naming_the_field(harness,
                                                       monkeypatch):
    sent = _sent_to_agent(monkeypatch)

    def bad_address(self, fabric, device, host):
        return {'vendor_id': '10de', 'product_id': '2330',
                'pci_address': '../../../dev/sda'}

    monkeypatch.setattr(fake.FakeFabricDriver, 'bind_device', bad_address)
    lease = harness.wait(_bind(harness), states.BIND_FAILED)
    assert 'the fabric driver answered a locator the host cannot use: ' \
        'locator pci_address' in lease.fault
    assert sent == []


def test_a_driver_that_builds_a_bad_locator_fails_the_bind(harness,
                                                           monkeypatch):
    def bad_serial(self, fabric, device, host):
        return locator.Locator(serial='bad\nserial')

    monkeypatch.setattr(fake.FakeFabricDriver, 'bind_device', bad_serial)
    lease = harness.wait(_bind(harness), states.BIND_FAILED)
    assert 'locator serial' in lease.fault
    assert 'cannot use' in lease.fault


def test_an_answer_that_is_no_locator_fails_the_bind(harness, monkeypatch):
    monkeypatch.setattr(fake.FakeFabricDriver, 'bind_device',
                        lambda self, fabric, device, host: '0000:41:00.0')
    lease = harness.wait(_bind(harness), states.BIND_FAILED)
    assert 'answered something that is not a locator' in lease.fault
