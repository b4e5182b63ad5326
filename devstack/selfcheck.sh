#!/bin/bash
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

# The plugin's self-check, run by hand after stack.sh (stack.sh runs it at
# test-config unless COMPOSABLE_VERIFY=False), as the DevStack user:
#
#   /opt/stack/composable/devstack/selfcheck.sh
#
# It uses DevStack's admin cloud (clouds.yaml "devstack-admin") and the
# plugin's default names; a local.conf that changed them exports the same
# variables first (COMPOSABLE_MEMORY_FLAVOR, COMPOSABLE_MEMORY_POOL,
# COMPOSABLE_GPU_POOL, DEFAULT_IMAGE_NAME, PRIVATE_NETWORK_NAME,
# COMPOSABLE_VERIFY_TIMEOUT). It ends with "composable self-check passed"
# and status 0, or says what failed and ends with status 1.

set -o errexit -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source $HERE/lib/composable-selfcheck

for var in $(compgen -v OS_); do
    unset "$var"
done
export OS_CLOUD=${COMPOSABLE_OS_CLOUD:-devstack-admin}

COMPOSABLE_MEMORY_FLAVOR=${COMPOSABLE_MEMORY_FLAVOR:-composable.mem2g}
COMPOSABLE_MEMORY_POOL=${COMPOSABLE_MEMORY_POOL:-memory-pool}
COMPOSABLE_GPU_POOL=${COMPOSABLE_GPU_POOL:-gpu-pool}
COMPOSABLE_VERIFY_TIMEOUT=${COMPOSABLE_VERIFY_TIMEOUT:-600}
PRIVATE_NETWORK_NAME=${PRIVATE_NETWORK_NAME:-private}
if [[ -z "$DEFAULT_IMAGE_NAME" ]]; then
    DEFAULT_IMAGE_NAME=$(openstack image list --status active -f value \
        -c Name | head -n 1)
fi
host=${COMPOSABLE_CHECK_HOST:-$(openstack compute service list \
    --service nova-compute -f value -c Host | head -n 1)}

composable_selfcheck "$host"
