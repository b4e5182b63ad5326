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

"""The fabric and device rows the Redfish driver tests hand the driver,
as the conductor would."""

from tests.functional.fabric import redfish_emulator as emu

PASSWORD = emu.DEFAULT_CONFIG['password']


def fabric_row(url, name='rack1', **info):
    """A fabric on the emulator at ``url``: short polls and timeouts so a
    fault shows in seconds; ``info`` adds or overrides driver_info."""
    driver_info = {'address': url, 'username': 'admin',
                   'password': PASSWORD, 'poll_interval': 0.05,
                   'timeout': 15}
    driver_info.update(info)
    return {'name': name, 'driver_info': driver_info}


def device_row(address):
    return {'uuid': 'dev-' + address.rsplit('/', 1)[-1], 'address': address}
