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

"""OpenStackClient plugin for composable: ``openstack composable ...``."""

import logging
import re

from keystoneauth1 import exceptions as ks_exc
from osc_lib import exceptions
from osc_lib import utils

LOG = logging.getLogger(__name__)

API_NAME = 'composable'
API_VERSION_OPTION = 'os_composable_api_version'
DEFAULT_API_VERSION = '1.0'
CLIENT_CLASS = 'composable.cli.client.Client'
API_VERSIONS = {
    '1': CLIENT_CLASS,
    '1.0': CLIENT_CLASS,
    '1.1': CLIENT_CLASS,
    '1.2': CLIENT_CLASS,
}

_VERSION_RE = re.compile(r'^1(\.\d+)?$')


def normalize_version(version):
    """'1' -> '1.0'; anything not 1.x is refused."""
    version = str(version or DEFAULT_API_VERSION).strip()
    if not _VERSION_RE.match(version):
        raise exceptions.UnsupportedVersion(
            'composable API version %r is not supported: use 1.N, '
            'for example 1.0' % version)
    if '.' not in version:
        version += '.0'
    return version


def check_api_version(check_version):
    """Validate --os-composable-api-version (called by the shell).

    Any 1.N is accepted here; the server answers 406 when it does not
    support it. Returning True skips the shell's own check against
    API_VERSIONS, which only lists the versions known when this was
    released.
    """
    normalize_version(check_version)
    return True


def _endpoint(instance):
    # A per-service override (clouds.yaml composable_endpoint_override), the
    # endpoint of --os-auth-type none (--os-endpoint), or the catalog.
    try:
        endpoint = instance.get_endpoint_for_service_type(
            API_NAME,
            region_name=instance.region_name,
            interface=instance.interface,
        )
    except ks_exc.CatalogException as exc:
        LOG.debug('No composable endpoint in the catalog: %s', exc)
        endpoint = None
    if not endpoint:
        raise exceptions.CommandError(
            'Could not find the composable API endpoint: no "composable" '
            'service in the catalog for region %s and interface %s. Pass '
            '--os-endpoint (with --os-auth-type none for a standalone '
            'service) or set composable_endpoint_override.'
            % (instance.region_name or '(any)', instance.interface or
               'public'))
    return endpoint


def make_client(instance):
    """Return the composable API client for the ClientManager."""
    version = normalize_version(instance._api_version.get(API_NAME))
    client_class = utils.get_client_class(API_NAME, '1', API_VERSIONS)
    instance.setup_auth()
    endpoint = _endpoint(instance)
    LOG.debug('Instantiating composable client %s for %s, API %s',
              client_class, endpoint, version)
    return client_class(session=instance.session, endpoint=endpoint,
                        api_version=version)


def build_option_parser(parser):
    """Hook to add global options."""
    parser.add_argument(
        '--os-composable-api-version',
        metavar='<composable-api-version>',
        default=utils.env('OS_COMPOSABLE_API_VERSION',
                          default=DEFAULT_API_VERSION),
        help='composable API version, default=%s '
             '(Env: OS_COMPOSABLE_API_VERSION)' % DEFAULT_API_VERSION,
    )
    return parser
