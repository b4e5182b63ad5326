#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

import argparse
import types

from keystoneauth1 import access
from keystoneauth1 import fixture
from keystoneauth1 import session as ks_session
from osc_lib import clientmanager
from osc_lib import exceptions
import pytest

from composable.cli import client as cli_client
from composable.cli import plugin


def _client_manager(config=None, catalog=True, interface='public',
                    region='RegionOne', version='1.0'):
    """An osc-lib ClientManager as the shell leaves it after password
    authentication, with a token whose catalog lists composable."""
    token = fixture.V3Token()
    if catalog:
        service = token.add_service('composable')
        service.add_standard_endpoints(
            public='https://composable.example.com',
            internal='http://10.0.0.5:6590/v1',
            region='RegionOne')
    manager = clientmanager.ClientManager.__new__(
        clientmanager.ClientManager)
    options = dict(config or {})
    options.setdefault('auth_type', 'password')
    manager._cli_options = types.SimpleNamespace(config=options)
    manager._api_version = {'composable': version}
    manager._auth_required = True
    manager._auth_ref = access.create(body=token)
    manager._auth_setup_completed = True
    manager.auth = None
    manager.session = ks_session.Session()
    manager.region_name = region
    manager.interface = interface
    return manager


def test_make_client_from_catalog():
    client = plugin.make_client(_client_manager())
    assert isinstance(client, cli_client.Client)
    assert client.endpoint == 'https://composable.example.com/v1'
    assert client.api_version == '1.0'


def test_make_client_uses_the_interface():
    client = plugin.make_client(_client_manager(interface='internal'))
    assert client.endpoint == 'http://10.0.0.5:6590/v1'


def test_make_client_endpoint_override():
    manager = _client_manager(
        config={'composable_endpoint_override': 'http://override:1/'})
    assert plugin.make_client(manager).endpoint == 'http://override:1/v1'


def test_make_client_without_endpoint():
    with pytest.raises(exceptions.CommandError) as info:
        plugin.make_client(_client_manager(catalog=False))
    assert '--os-endpoint' in str(info.value)
    with pytest.raises(exceptions.CommandError):
        plugin.make_client(_client_manager(region='RegionTwo'))


def test_make_client_version():
    client = plugin.make_client(_client_manager(version='1'))
    assert client.api_version == '1.0'


@pytest.mark.parametrize('version, expected', [
    ('1', '1.0'), ('1.0', '1.0'), ('1.12', '1.12'), (None, '1.0')])
def test_normalize_version(version, expected):
    assert plugin.normalize_version(version) == expected


@pytest.mark.parametrize('version', ['2', '2.0', 'latest', '1.x', 'v1'])
def test_unsupported_versions(version):
    with pytest.raises(exceptions.UnsupportedVersion):
        plugin.check_api_version(version)


def test_check_api_version():
    assert plugin.check_api_version('1.0') is True


def test_plugin_constants():
    assert plugin.API_NAME == 'composable'
    assert plugin.API_VERSION_OPTION == 'os_composable_api_version'
    assert plugin.DEFAULT_API_VERSION == '1.0'
    assert '1.0' in plugin.API_VERSIONS


def test_build_option_parser(monkeypatch):
    monkeypatch.delenv('OS_COMPOSABLE_API_VERSION', raising=False)
    parser = plugin.build_option_parser(argparse.ArgumentParser())
    assert parser.parse_args([]).os_composable_api_version == '1.0'
    args = parser.parse_args(['--os-composable-api-version', '1.1'])
    assert args.os_composable_api_version == '1.1'
    monkeypatch.setenv('OS_COMPOSABLE_API_VERSION', '1.2')
    parser = plugin.build_option_parser(argparse.ArgumentParser())
    assert parser.parse_args([]).os_composable_api_version == '1.2'
