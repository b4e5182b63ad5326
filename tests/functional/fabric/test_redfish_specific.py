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

"""The redfish driver against a service that composes whole systems
(DSP2050's specific composition: POST /redfish/v1/Systems, DELETE, and
PATCH of Links.ResourceBlocks where allowed), how it tells the modes
apart, and hosts matched by their DMI UUID."""

import copy
import threading

import pytest

from composable.common import exception
from tests.functional.fabric import redfish_emulator as emu
from tests.functional.fabric import redfish_rows

PASSWORD = emu.DEFAULT_CONFIG['password']
_fabric = redfish_rows.fabric_row
_device = redfish_rows.device_row
GPU0 = emu.BLOCKS + '/GPU0'
HOST0 = {'name': 'compute-0'}
UUID0 = emu.DEFAULT_CONFIG['systems'][0]['uuid']


def _changes(emulator):
    """(method, path) of the requests that change systems."""
    return [(r['method'], r['path']) for r in emulator.requests
            if r['method'] in ('POST', 'DELETE', 'PATCH')
            and r['path'].startswith(emu.SYSTEMS)]


def _system_of(emulator, name):
    """(system id, block ids) of the system named ``name``."""
    with emulator.locked() as state:
        found = [(sid, list(s['blocks'])) for sid, s in
                 state.systems.items() if s['name'] == name]
    assert len(found) == 1, found
    return found[0]


def _gpu0(emulator):
    with emulator.locked() as state:
        return state.blocks['GPU0']['state'], state.blocks['GPU0']['system']


# ------------------------------------------------------- mode detection

def test_the_service_says_which_mode_it_offers(profile, emulator, driver):
    url, _ = profile('specific')
    found = driver.describe_service(_fabric(url))
    assert found['specific'] is True
    assert found['expandable_systems'] == []
    assert found['other_systems'][emu.SYSTEMS + '/compute-0'] == [
        'ComputerSystem.Reset']
    assert found['capabilities'] == emu.SYSTEMS + '/Capabilities'
    assert found['updatable_after_create'] is False
    assert found['allow_overprovisioning'] is False
    url, _ = emulator
    found = driver.describe_service(_fabric(url))
    assert found['specific'] is False
    assert found['expandable_systems'] == [emu.SYSTEMS + '/compute-0',
                                           emu.SYSTEMS + '/compute-1']


# ------------------------------------------- composing the whole system

def test_bind_composes_the_hosts_system_again_with_the_block(profile,
                                                             driver):
    url, emulator = profile('specific')
    fabric = _fabric(url)
    locator = driver.bind_device(fabric, _device(GPU0), HOST0)
    assert locator.vendor_id == '10de' and locator.serial
    sid, blocks = _system_of(emulator, 'compute-0')
    assert sid != 'compute-0'
    assert sorted(blocks) == ['GPU0', 'compute-0-Compute']
    assert _gpu0(emulator) == ('Composed', sid)
    assert _changes(emulator) == [('DELETE', emu.SYSTEMS + '/compute-0'),
                                  ('POST', emu.SYSTEMS)]
    posted = [r['body'] for r in emulator.requests
              if r['method'] == 'POST' and r['path'] == emu.SYSTEMS][0]
    assert posted['Name'] == 'compute-0'
    assert posted['Links']['ResourceBlocks'] == [
        {'@odata.id': emu.BLOCKS + '/compute-0-Compute'},
        {'@odata.id': GPU0}]
    # The new system is the host's: the sync reports it bound there,
    # and a bind again finds it.
    found = {d['address']: d for d in driver.discover(fabric)}
    assert found[GPU0]['bound_to'] == 'compute-0'
    assert found[emu.BLOCKS + '/GPU1']['bound_to'] is None
    driver.bind_device(fabric, _device(GPU0), HOST0)
    assert len(_changes(emulator)) == 2
    # Unbinding composes it again without the block.
    driver.unbind_device(fabric, _device(GPU0), HOST0)
    sid2, blocks = _system_of(emulator, 'compute-0')
    assert blocks == ['compute-0-Compute']
    assert _gpu0(emulator) == ('Unused', None)
    with emulator.locked() as state:
        # The server's UUID stays with its compute block.
        assert state.systems[sid2]['uuid'] == UUID0
    # By UUID the host is found however often it was composed.
    fabric = _fabric(url, match_by='uuid')
    driver.bind_device(fabric, _device(GPU0),
                       {'name': 'compute-0', 'uuid': UUID0})
    assert _gpu0(emulator)[0] == 'Composed'


def test_where_blocks_may_change_the_system_is_patched(profile, driver):
    url, emulator = profile(dict(emu.PROFILES['specific'], updatable=True))
    fabric = _fabric(url)
    driver.bind_device(fabric, _device(GPU0), HOST0)
    assert _system_of(emulator, 'compute-0') == (
        'compute-0', ['compute-0-Compute', 'GPU0'])
    driver.unbind_device(fabric, _device(GPU0), HOST0)
    assert _system_of(emulator, 'compute-0') == (
        'compute-0', ['compute-0-Compute'])
    assert _changes(emulator) == [('PATCH', emu.SYSTEMS + '/compute-0')] * 2
    patches = [r for r in emulator.requests if r['method'] == 'PATCH']
    assert all(r['headers'].get('if-match') for r in patches)


def test_task_monitors_and_412_are_followed(profile, driver):
    url, emulator = profile(dict(emu.PROFILES['specific'], task_polls=2))
    emulator.inject('412', method='DELETE', path=emu.SYSTEMS, count=1)
    driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    sid, blocks = _system_of(emulator, 'compute-0')
    assert 'GPU0' in blocks
    driver.unbind_device(_fabric(url), _device(GPU0), HOST0)
    assert _gpu0(emulator) == ('Unused', None)
    monitors = [r for r in emulator.requests
                if r['path'].startswith(emu.MONITORS)]
    # DELETE and POST of the bind and of the unbind: two 202 and the
    # final answer each.
    assert len(monitors) == 12
    assert _changes(emulator).count(('DELETE', emu.SYSTEMS +
                                     '/compute-0')) == 2


def test_a_failed_post_gives_the_host_its_system_back(profile, driver):
    url, emulator = profile('specific')
    emulator.inject('status', method='POST', path=emu.SYSTEMS, count=1,
                    code=500)
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    assert 'HTTP 500' in str(err.value)
    assert PASSWORD not in str(err.value)
    sid, blocks = _system_of(emulator, 'compute-0')
    assert blocks == ['compute-0-Compute']
    assert _gpu0(emulator) == ('Unused', None)


def test_a_block_stuck_composing_times_out_and_is_undone(profile, driver):
    url, emulator = profile('specific')
    emulator.set_block_fault('GPU0', 'stuck')
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url, timeout=0.5), _device(GPU0), HOST0)
    assert 'still Composing' in str(err.value)
    # The conductor undoes the failed bind.
    driver.unbind_device(_fabric(url), _device(GPU0), HOST0)
    assert _gpu0(emulator) == ('Unused', None)
    assert _system_of(emulator, 'compute-0')[1] == ['compute-0-Compute']


def test_a_task_that_does_not_end_in_time_is_undone_after(profile,
                                                          driver):
    url, emulator = profile('specific')

    slowed = []

    def slow_post(record):
        # Only the bind's POST: its task runs on and on.
        if (record['method'] == 'POST' and record['path'] == emu.SYSTEMS
                and not slowed):
            slowed.append(record)
            emulator.task_polls = 10000

    emulator.observe(slow_post)
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url, timeout=1), _device(GPU0), HOST0)
    assert 'did not finish within' in str(err.value)
    # The conductor undoes the bind; the service had composed it.
    emulator.task_polls = 0
    driver.unbind_device(_fabric(url), _device(GPU0), HOST0)
    assert _gpu0(emulator) == ('Unused', None)
    assert _system_of(emulator, 'compute-0')[1] == ['compute-0-Compute']


def _delete_task_never_ends(emulator):
    """The next DELETE of a system is done at once, but its task monitor
    answers 202 for ever."""
    seen = []

    def watch(record):
        if (record['method'] == 'DELETE'
                and record['path'].startswith(emu.SYSTEMS + '/')
                and not seen):
            seen.append(record)
            emulator.task_polls = 10000
        elif seen and emulator.task_polls:
            # Only that DELETE's monitor: what follows is answered.
            emulator.task_polls = 0

    emulator.observe(watch)
    return seen


def test_a_delete_whose_task_never_ends_leaves_the_host_a_system(
        profile, driver):
    url, emulator = profile('specific')
    seen = _delete_task_never_ends(emulator)
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url, timeout=1), _device(GPU0), HOST0)
    message = str(err.value)
    assert seen
    assert 'the DELETE of system %s/compute-0' % emu.SYSTEMS in message
    assert 'did not finish within' in message
    assert 'composed again with the blocks it had' in message
    assert PASSWORD not in message
    # The host has its system, with the blocks it had; the GPU is free.
    sid, blocks = _system_of(emulator, 'compute-0')
    assert blocks == ['compute-0-Compute']
    assert _gpu0(emulator) == ('Unused', None)
    posted = [r['body'] for r in emulator.requests
              if r['method'] == 'POST' and r['path'] == emu.SYSTEMS]
    assert [p['Links']['ResourceBlocks'] for p in posted] == [
        [{'@odata.id': emu.BLOCKS + '/compute-0-Compute'}]]
    # The conductor's undo finds nothing to undo; a bind then works.
    driver.unbind_device(_fabric(url), _device(GPU0), HOST0)
    driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    assert _gpu0(emulator)[0] == 'Composed'


def test_a_delete_whose_task_never_ends_on_unbind(profile, driver):
    url, emulator = profile('specific')
    driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    _delete_task_never_ends(emulator)
    with pytest.raises(exception.DriverError) as err:
        driver.unbind_device(_fabric(url, timeout=1), _device(GPU0), HOST0)
    assert 'composed again with the blocks it had' in str(err.value)
    # The system is back with the GPU: the unbind failed, nothing lost.
    sid, blocks = _system_of(emulator, 'compute-0')
    assert sorted(blocks) == ['GPU0', 'compute-0-Compute']
    driver.unbind_device(_fabric(url), _device(GPU0), HOST0)
    assert _system_of(emulator, 'compute-0')[1] == ['compute-0-Compute']
    assert _gpu0(emulator) == ('Unused', None)


def test_a_delete_not_known_to_be_done_leaves_the_system_as_it_is(
        profile, driver):
    url, emulator = profile('specific')
    # Accepted without a task monitor, and never done.
    emulator.inject('status', method='DELETE', path=emu.SYSTEMS, count=1,
                    code=202)
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url, timeout=1), _device(GPU0), HOST0)
    message = str(err.value)
    assert 'without a task monitor' in message
    assert 'is still there as it was' in message
    assert _system_of(emulator, 'compute-0') == ('compute-0',
                                                 ['compute-0-Compute'])
    assert _changes(emulator) == [('DELETE', emu.SYSTEMS + '/compute-0')]
    assert _gpu0(emulator) == ('Unused', None)


def test_an_undo_finds_nothing_to_do_where_the_host_lost_its_system(
        profile, driver):
    url, emulator = profile('specific')
    with emulator.locked() as state:
        state.systems.pop('compute-0')
        state.blocks['compute-0-Compute'].update(state='Unused',
                                                 system=None)
    # The block is in no system: nothing to undo.
    driver.unbind_device(_fabric(url), _device(GPU0), HOST0)
    # One that is held somewhere is not let go unnoticed.
    driver.bind_device(_fabric(url), _device(GPU0), {'name': 'compute-1'})
    with pytest.raises(exception.DriverError) as err:
        driver.unbind_device(_fabric(url), _device(GPU0), HOST0)
    assert 'compute-0' in str(err.value)


def test_a_failed_composition_reports_the_message(profile, driver):
    url, emulator = profile('specific')
    emulator.set_block_fault('GPU0', 'fail', 'retimer 3 lost the link')
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    assert 'retimer 3 lost the link' in str(err.value)
    driver.unbind_device(_fabric(url), _device(GPU0), HOST0)
    assert _gpu0(emulator)[1] is None


def test_an_unbind_waits_for_a_bind_still_running(profile, driver):
    """The conductor stopped waiting for a bind that goes on in its
    thread; the unbind that undoes it comes after it."""
    url, emulator = profile('specific')
    sent = threading.Event()
    emulator.observe(lambda record: sent.set()
                     if record['method'] == 'POST'
                     and record['path'] == emu.SYSTEMS else None)
    emulator.inject('delay', method='POST', path=emu.SYSTEMS, seconds=1.5)
    binder = threading.Thread(target=driver.bind_device,
                              args=(_fabric(url), _device(GPU0), HOST0))
    binder.start()
    assert sent.wait(30)
    driver.unbind_device(_fabric(url), _device(GPU0), HOST0)
    binder.join(30)
    assert not binder.is_alive()
    assert _gpu0(emulator) == ('Unused', None)
    assert _system_of(emulator, 'compute-0')[1] == ['compute-0-Compute']


def test_a_host_mapped_by_odata_id_is_refused_before_anything(
        profile, driver):
    url, emulator = profile('specific')
    fabric = _fabric(url, system_map={
        'compute-0': emu.SYSTEMS + '/compute-0'})
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(fabric, _device(GPU0), HOST0)
    assert 'UUID or unique name' in str(err.value)
    assert _changes(emulator) == []
    # By UUID it binds, and keeps binding after the system changed.
    fabric = _fabric(url, system_map={'compute-0': UUID0})
    driver.bind_device(fabric, _device(GPU0), HOST0)
    driver.unbind_device(fabric, _device(GPU0), HOST0)
    assert _gpu0(emulator) == ('Unused', None)


# ---------------------------------------------------- choosing the mode

def test_composition_mode_forces_one(profile, emulator, driver):
    url, specific = profile('specific')
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url, composition_mode='expandable'),
                           _device(GPU0), HOST0)
    assert 'not expandable' in str(err.value)
    assert 'offers only ComputerSystem.Reset' in str(err.value)
    assert _changes(specific) == []
    # Specific composition asked of a service that has none: its
    # refusal is reported and the host keeps its system.
    url, expandable = emulator
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url, composition_mode='specific'),
                           _device(GPU0), HOST0)
    assert 'DELETE' in str(err.value) and 'HTTP 405' in str(err.value)
    assert _system_of(expandable, 'compute-0')[0] == 'compute-0'


def test_a_service_offering_neither_mode_says_what_is_missing(profile,
                                                              driver):
    url, emulator = profile('states')
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(GPU0), {'name': 'fixed-0'})
    message = str(err.value)
    assert 'not expandable: it offers only ComputerSystem.Reset' in message
    assert 'ComputerSystemComposition' in message


def test_constrained_composition_only_is_said_to_be_no_way(
        profile, driver):
    url, emulator = profile(dict(emu.DEFAULT_CONFIG,
                                 composition='constrained'))
    assert driver.describe_service(_fabric(url))['constrained'] is True
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    message = str(err.value)
    assert 'not expandable' in message
    assert 'ComputerSystemConstrainedComposition' in message
    assert _changes(emulator) == []


@pytest.mark.parametrize('mode', ['composed', '', 'Specific'])
def test_an_unknown_composition_mode_is_refused(driver, mode):
    with pytest.raises(exception.Invalid) as err:
        driver.validate_driver_info(
            _fabric('http://127.0.0.1:1',
                    composition_mode=mode)['driver_info'])
    assert 'composition_mode' in str(err.value)


# ------------------------------------------------------------ DMI UUID

def _dmi(name, uuid):
    return {'name': name, 'properties': {'dmi_uuid': uuid.upper()}}


def test_a_host_is_found_by_its_dmi_uuid(profile, driver):
    url, emulator = profile('duplicate-names')
    sled2 = '7a3e0c1e-0b7e-4b53-9d1e-5d1f6a2f0002'
    host = _dmi('node-7', sled2)
    driver.bind_device(_fabric(url), _device(GPU0), host)
    with emulator.locked() as state:
        assert state.blocks['GPU0']['system'] == 'Sled-2'
    fabric = dict(_fabric(url), hosts=[host])
    found = {d['address']: d for d in driver.discover(fabric)}
    assert found[GPU0]['bound_to'] == 'node-7'
    driver.unbind_device(_fabric(url), _device(GPU0), host)
    assert _gpu0(emulator) == ('Unused', None)


def test_a_dmi_uuid_several_systems_share_is_refused(profile, driver):
    config = copy.deepcopy(emu.PROFILES['duplicate-names'])
    shared = '7a3e0c1e-0b7e-4b53-9d1e-5d1f6a2f00ff'
    for system in config['systems'][:2]:
        system['uuid'] = shared
    url, emulator = profile(config)
    host = _dmi('node-7', shared)
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(GPU0), host)
    message = str(err.value)
    assert emu.SYSTEMS + '/Sled-1' in message
    assert emu.SYSTEMS + '/Sled-2' in message
    assert emu.SYSTEMS + '/Sled-3' not in message
    assert 'system_map' in message
    assert emulator.actions() == []
    # Nor is the host named by it in the sync.
    found = driver.discover(dict(_fabric(url), hosts=[host]))
    assert not [d for d in found if 'node-7' in (d.get('hosts') or [])]
