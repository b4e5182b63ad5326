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

"""What the redfish driver does after a DELETE of a host's system whose
outcome is unknown (specific composition), for each thing the Systems
collection may then show. The service is a mock here (its answers are
the sequence of system lists given); the emulator tests cover the
service's side (tests/functional/fabric/test_redfish_specific.py)."""

import pytest

from composable.common import exception
from composable.fabric.redfish import driver as redfish_driver
from composable.fabric.redfish import models

SYSTEMS = '/redfish/v1/Systems'
BLOCKS = '/redfish/v1/CompositionService/ResourceBlocks'
INFO = {'timeout': 0.3, 'poll_interval': 0.01}


def _system(sid, blocks):
    return models.System(SYSTEMS + '/' + sid, 'node-0', 'node-0', None,
                         [BLOCKS + '/' + b for b in blocks], {})


class MockConnection(object):
    address = 'https://fm.example'


class MockedService(redfish_driver.RedfishFabricDriver):
    """The driver with the service's Systems collection and POST
    mocked."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.posted = []

    def _systems(self, conn):
        answer = self.answers.pop(0) if len(self.answers) > 1 else \
            self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def _post_system(self, conn, info, composition, system, body, deadline):
        self.posted.append(body)
        return SYSTEMS + '/Composed-9'


OLD = _system('Composed-1', ['node-0-Compute', 'GPU1'])
EXC = exception.DriverError(reason='the task of DELETE did not finish')


def _run(driver):
    with pytest.raises(exception.DriverError) as err:
        driver._after_unfinished_delete(MockConnection(), INFO, None, OLD,
                                        [BLOCKS + '/GPU0'], EXC)
    return str(err.value)


def test_gone_after_a_while_is_composed_again_with_its_blocks():
    driver = MockedService([([OLD], {}), ([OLD], {}), ([], {})])
    message = _run(driver)
    assert driver.posted == [{'Links': {'ResourceBlocks': [
        {'@odata.id': BLOCKS + '/node-0-Compute'},
        {'@odata.id': BLOCKS + '/GPU1'}]}}]
    assert 'composed again with the blocks it had' in message
    assert SYSTEMS + '/Composed-9' in message
    assert BLOCKS + '/GPU0' in message


def test_composed_again_by_the_service_is_left_alone():
    again = _system('Composed-2', ['node-0-Compute', 'GPU1'])
    driver = MockedService([([again], {})])
    message = _run(driver)
    assert driver.posted == []
    assert 'the service composed system node-0 again itself' in message


def test_still_there_is_left_as_it_is():
    driver = MockedService([([OLD], {})])
    message = _run(driver)
    assert driver.posted == []
    assert 'still there as it was' in message


def test_nothing_is_composed_when_the_systems_cannot_be_told():
    driver = MockedService([([], {SYSTEMS + '/Other': 'HTTP 500'})])
    message = _run(driver)
    assert driver.posted == []
    assert 'could not be told' in message and 'HTTP 500' in message
    driver = MockedService([exception.DriverError(reason='no answer')])
    assert 'no answer' in _run(driver)
    assert driver.posted == []


def test_a_failed_recomposition_says_the_host_has_no_system():
    driver = MockedService([([], {})])

    def refuse(*args):
        raise exception.DriverError(reason='HTTP 400 no compute block')

    driver._post_system = refuse
    message = _run(driver)
    assert 'the host has no system on the service now' in message
    assert 'HTTP 400 no compute block' in message
