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

"""The notification objects: their fingerprints (a payload changes only
with a new version), their event types, and the documentation's samples
(doc/notification_samples/) against freshly built notifications."""

import json
import os
import types

from oslo_versionedobjects import base as ovo_base
from oslo_versionedobjects import fields as ovo_fields
from oslo_versionedobjects import fixture
import pytest

from composable import notifications
from composable.notifications.objects import base
from composable.notifications.objects import pool as pool_objects
from composable.notifications import samples

# Change a payload's fields, then bump its version (minor: fields added;
# major: anything else), update the hash here, and say so in a release
# note: consumers parse these.
EXPECTED_FINGERPRINTS = {
    'DeviceHealthNotification': '1.0-eb32decf1297f3408ebe91cd51b6b452',
    'DeviceHealthPayload': '1.0-a6a44d5d5ab5d7f48d0817ad5025bb50',
    'EventType': '1.2-a5a694e3d4370d7caa34433204656ebb',
    'LeaseNotification': '1.0-eb32decf1297f3408ebe91cd51b6b452',
    'LeasePayload': '1.0-9af5ea510fda62ea9bd009f990f16540',
    'NotificationPublisher': '1.0-578ee5fea2922ff32e8917621f140857',
    'PoolNotification': '1.0-eb32decf1297f3408ebe91cd51b6b452',
    'PoolPayload': '1.1-e2ac3d3c5ff953b019bd6504a818d2a1',
}

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))))


def _classes():
    """composable's notification objects only: oslo.versionedobjects keeps
    one registry per process, which holds Nova's objects too once
    anything imported them."""
    found = {}
    registered = base.NotificationObjectRegistry.obj_classes()
    for name, classes in registered.items():
        ours = [c for c in classes
                if c.OBJ_PROJECT_NAMESPACE == base.NAMESPACE]
        if ours:
            found[name] = ours
    return found


def test_object_fingerprints():
    checker = fixture.ObjectVersionChecker(_classes())
    expected, actual = checker.test_hashes(EXPECTED_FINGERPRINTS)
    assert expected == actual, (
        'Notification objects changed; bump their version: %s' % actual)


@pytest.mark.parametrize('name', sorted(n for n in EXPECTED_FINGERPRINTS
                                        if n.endswith('Payload')))
def test_payload_schema_names_its_fields(name):
    cls = _classes()[name][0]
    assert set(cls.SCHEMA) <= set(cls.fields)
    # The version its fingerprint was taken at.
    assert cls.VERSION == EXPECTED_FINGERPRINTS[name].split('-')[0]


@pytest.mark.parametrize('name', sorted(n for n in EXPECTED_FINGERPRINTS
                                        if n.endswith('Notification')))
def test_notifications_carry_a_registered_payload(name):
    cls = _classes()[name][0]
    payload = cls.fields['payload']._type._obj_name
    assert payload in _classes()
    assert set(cls.fields) == {'priority', 'event_type', 'publisher',
                               'payload'}


def test_event_types():
    assert base.EventType('lease', 'bind', 'start').to_event_type() == (
        'lease.bind.start')
    assert base.EventType('lease', 'expire').to_event_type() == (
        'lease.expire')
    with pytest.raises(ValueError):
        base.EventType('lease', 'explode')
    with pytest.raises(ValueError):
        base.EventType('lease', 'bind', 'midway')


def test_a_payload_refuses_a_missing_required_value():
    broken = types.SimpleNamespace(uuid=None, name='p', kind='gpu',
                                   resource_class='X', total=0, reserved=0,
                                   used=0, step_size=1, provider_uuid=None,
                                   fabric=None)
    with pytest.raises(ValueError, match='pool.uuid is required'):
        pool_objects.PoolPayload(broken)


def test_every_notified_event_has_a_sample():
    built = samples.build()
    events = set()
    for action in notifications.LEASE_ACTIONS.values():
        if action == base.ACTION_EXPIRE:
            events.add('lease.expire')
        else:
            events.update('lease.%s.%s' % (action, phase)
                          for phase in base.PHASES)
    events.update(['device.health', 'pool.update'])
    assert set(built) == events


def test_documentation_samples_are_current():
    directory = os.path.join(ROOT, samples.SAMPLE_DIR)
    built = samples.build()
    on_disk = {name[:-len('.json')] for name in os.listdir(directory)
               if name.endswith('.json')}
    assert on_disk == set(built), (
        'Regenerate with: python -m composable.notifications.samples')
    for event_type, sample in built.items():
        with open(os.path.join(directory, event_type + '.json')) as f:
            text = f.read()
        assert json.loads(text) == json.loads(samples.render(sample)), (
            '%s.json is stale; regenerate with: python -m '
            'composable.notifications.samples' % event_type)
        # What the documentation shows is what a consumer can parse.
        assert json.loads(text)['event_type'] == event_type


def test_fingerprints_ignore_other_projects_objects():
    # Nova's objects land in the same process-wide table when both are
    # imported (the Nova plugins' tests): a foreign object, even one
    # named like composable's, changes nothing here.
    @ovo_base.VersionedObjectRegistry.register
    class LeasePayload(ovo_base.VersionedObject):
        OBJ_PROJECT_NAMESPACE = 'another-project'
        VERSION = '9.9'
        fields = {'other': ovo_fields.StringField()}

    assert any(c.OBJ_PROJECT_NAMESPACE == 'another-project'
               for c in base.NotificationObjectRegistry.obj_classes()[
                   'LeasePayload'])
    test_object_fingerprints()
    assert [c.VERSION for c in _classes()['LeasePayload']] == ['1.0']
