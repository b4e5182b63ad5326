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

#
# DevStack plugin for composable: pooled memory, GPUs and PCIe devices leased
# to Nova instances.
#
# lib-style functions, called at the phases DevStack runs plugins in (see
# the dispatch at the end of this file).

# Save trace setting
_XTRACE_COMPOSABLE=$(set +o | grep xtrace)
set -o xtrace

function is_composable_enabled {
    is_service_enabled composable-api composable-conductor \
        composable-agent && return 0
    return 1
}

# install_composable - install composable and its Python requirements
function install_composable {
    setup_develop $COMPOSABLE_DIR
    if is_service_enabled composable-api; then
        pip_install uwsgi
    fi
}

# configure_composable - write /etc/composable/composable.conf
function configure_composable {
    sudo install -d -o $STACK_USER -m 755 $COMPOSABLE_CONF_DIR
    rm -f $COMPOSABLE_CONF_FILE

    iniset $COMPOSABLE_CONF_FILE DEFAULT debug $ENABLE_DEBUG_LOG_LEVEL
    iniset $COMPOSABLE_CONF_FILE DEFAULT host $LOCAL_HOSTNAME
    iniset $COMPOSABLE_CONF_FILE DEFAULT auth_strategy keystone
    iniset $COMPOSABLE_CONF_FILE DEFAULT use_syslog $SYSLOG

    iniset $COMPOSABLE_CONF_FILE database connection \
        $(database_connection_url composable)

    iniset_rpc_backend composable $COMPOSABLE_CONF_FILE

    configure_keystone_authtoken_middleware $COMPOSABLE_CONF_FILE composable

    iniset $COMPOSABLE_CONF_FILE api host_ip $COMPOSABLE_SERVICE_HOST
    iniset $COMPOSABLE_CONF_FILE api port $COMPOSABLE_SERVICE_PORT
    iniset $COMPOSABLE_CONF_FILE api public_endpoint $COMPOSABLE_ENDPOINT

    iniset $COMPOSABLE_CONF_FILE fabric enabled_drivers \
        $COMPOSABLE_FABRIC_DRIVERS
    iniset $COMPOSABLE_CONF_FILE agent roles $COMPOSABLE_AGENT_ROLES
    iniset $COMPOSABLE_CONF_FILE agent memory_exporter \
        $COMPOSABLE_MEMORY_EXPORTER
    iniset $COMPOSABLE_CONF_FILE allocator memory_extent_mb \
        $COMPOSABLE_MEMORY_EXTENT_MB
    if [[ -n "$COMPOSABLE_PCI_BACKEND" ]]; then
        iniset $COMPOSABLE_CONF_FILE compute_node pci_backend \
            $COMPOSABLE_PCI_BACKEND
    fi
    # The agent runs as the DevStack user, who may write here.
    mkdir -p $COMPOSABLE_STATE_DIR
    iniset $COMPOSABLE_CONF_FILE compute_node pci_state_file \
        $COMPOSABLE_STATE_DIR/pci-devices.json

    if is_service_enabled composable-api; then
        # The API under uWSGI, answering HTTP itself on its own port.
        write_uwsgi_config "$COMPOSABLE_UWSGI_CONF" "$COMPOSABLE_UWSGI" \
            "/" "$COMPOSABLE_SERVICE_HOST:$COMPOSABLE_SERVICE_PORT" \
            "composable-api"
    fi
}

# The libvirt hook binds an instance's leases when its domain starts: on
# a compute node, the agent answers it on a unix socket and the hook is
# installed in /etc/libvirt/hooks/qemu.d/50-composable.
function is_composable_compute {
    is_service_enabled composable-agent && is_service_enabled n-cpu && \
        [[ ",$COMPOSABLE_AGENT_ROLES," == *",compute_node,"* ]]
}

# install_composable_libvirt_hook - the hook, and libvirtd told about it
function install_composable_libvirt_hook {
    local socket=${COMPOSABLE_HOOK_SOCKET:-/run/composable/libvirt-hook.sock}
    # The agent runs as $STACK_USER; libvirtd runs the hook as root.
    sudo install -d -o $STACK_USER -m 755 $(dirname $socket)
    iniset $COMPOSABLE_CONF_FILE compute_node hook_socket $socket
    sudo $COMPOSABLE_BIN_DIR/composable-libvirt-hook --install \
        --config-file $COMPOSABLE_CONF_FILE
    # libvirtd looks for hooks when it starts and on SIGHUP (reload).
    local daemon
    for daemon in libvirtd virtqemud; do
        if sudo systemctl is-active --quiet $daemon; then
            sudo systemctl reload $daemon
        fi
    done
}

# create_composable_accounts - the service user and the keystone catalog
function create_composable_accounts {
    # The "composable" user, with the service role in the service project:
    # the "service" persona of the policy defaults.
    create_service_user "composable"

    get_or_create_service "composable" "composable" \
        "Composable rack resources: pooled memory, GPUs and PCIe devices"
    get_or_create_endpoint "composable" "$REGION_NAME" "$COMPOSABLE_ENDPOINT"
}

# init_composable - create and migrate the database
function init_composable {
    recreate_database composable
    $COMPOSABLE_BIN_DIR/composable-dbsync --config-file \
        $COMPOSABLE_CONF_FILE upgrade
}

# start_composable - start the services
function start_composable {
    if is_service_enabled composable-api; then
        run_process composable-api \
            "$COMPOSABLE_BIN_DIR/uwsgi --procname-prefix composable-api --ini $COMPOSABLE_UWSGI_CONF"
        echo "Waiting for composable-api to answer..."
        if ! wait_for_service $SERVICE_TIMEOUT "$COMPOSABLE_ENDPOINT/"; then
            die $LINENO "composable-api did not start"
        fi
    fi
    run_process composable-conductor \
        "$COMPOSABLE_BIN_DIR/composable-conductor --config-file $COMPOSABLE_CONF_FILE"
    run_process composable-agent \
        "$COMPOSABLE_BIN_DIR/composable-agent --config-file $COMPOSABLE_CONF_FILE"
}

# The Redfish emulator's inventory: one system named after this host, two
# GPU blocks in its zone. Its password is made here and stays in the
# emulator's file and composable's database (driver_info, never shown).
function configure_composable_redfish_emulator {
    local password xtrace
    xtrace=$(set +o | grep xtrace)
    set +o xtrace
    password=$(generate_hex_string 16)
    # Readable by the stack user only, before the password is in it.
    sudo install -m 600 -o $STACK_USER /dev/null \
        $COMPOSABLE_REDFISH_EMULATOR_CONF
    cat <<EOF | sudo tee $COMPOSABLE_REDFISH_EMULATOR_CONF >/dev/null
{"username": "composable", "password": "$password",
 "zones": [{"id": "1"}],
 "systems": [{"id": "$LOCAL_HOSTNAME", "name": "$LOCAL_HOSTNAME",
              "zones": ["1"]}],
 "blocks": [{"id": "GPU0", "kind": "gpu", "vendor_id": "10de",
             "device_id": "2330", "serial": "EMU-GPU-0",
             "model": "H100 80GB", "zones": ["1"]},
            {"id": "GPU1", "kind": "gpu", "vendor_id": "10de",
             "device_id": "2330", "serial": "EMU-GPU-1",
             "model": "H100 80GB", "zones": ["1"]}]}
EOF
    $xtrace
}

# The emulator runs from the source tree (it lives with the tests).
function start_composable_redfish_emulator {
    run_process composable-redfish-emulator \
        "$PYTHON -m tests.functional.fabric.redfish_emulator --host $COMPOSABLE_SERVICE_HOST --port $COMPOSABLE_REDFISH_EMULATOR_PORT --config $COMPOSABLE_REDFISH_EMULATOR_CONF" \
        "" "" "PYTHONPATH=$COMPOSABLE_DIR"
    if ! wait_for_service $SERVICE_TIMEOUT \
            "http://$COMPOSABLE_SERVICE_HOST:$COMPOSABLE_REDFISH_EMULATOR_PORT/redfish/v1/"; then
        die $LINENO "the Redfish emulator did not start"
    fi
}

# The emulator as a fabric of composable; the conductor's fabric sync
# then finds its GPUs (a pool of kind gpu on that fabric takes them).
function register_composable_redfish_fabric {
    local password xtrace
    # The password stays out of the stack log.
    xtrace=$(set +o | grep xtrace)
    set +o xtrace
    password=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["password"])' \
        $COMPOSABLE_REDFISH_EMULATOR_CONF)
    openstack composable fabric create redfish-emulator --driver redfish \
        --driver-info address=http://$COMPOSABLE_SERVICE_HOST:$COMPOSABLE_REDFISH_EMULATOR_PORT \
        --driver-info username=composable \
        --driver-info password=$password
    $xtrace
}

# stop_composable - stop the services
function stop_composable {
    local serv
    for serv in composable-api composable-conductor composable-agent \
            composable-redfish-emulator; do
        stop_process $serv
    done
}

# cleanup_composable - remove what the plugin left behind
function cleanup_composable {
    if is_service_enabled composable-api; then
        remove_uwsgi_config "$COMPOSABLE_UWSGI_CONF" "composable-api"
    fi
    sudo rm -f $COMPOSABLE_REDFISH_EMULATOR_CONF
    if [[ -x $COMPOSABLE_BIN_DIR/composable-libvirt-hook ]]; then
        sudo $COMPOSABLE_BIN_DIR/composable-libvirt-hook --uninstall
    fi
}

if is_composable_enabled; then
    if [[ "$1" == "stack" && "$2" == "install" ]]; then
        echo_summary "Installing composable"
        install_composable
    elif [[ "$1" == "stack" && "$2" == "post-config" ]]; then
        echo_summary "Configuring composable"
        configure_composable
        if is_composable_compute; then
            install_composable_libvirt_hook
        fi
        if is_service_enabled keystone; then
            create_composable_accounts
        fi
    elif [[ "$1" == "stack" && "$2" == "extra" ]]; then
        echo_summary "Initializing and starting composable"
        init_composable
        if [[ "$COMPOSABLE_REDFISH_EMULATOR" == "True" ]]; then
            configure_composable_redfish_emulator
            start_composable_redfish_emulator
        fi
        start_composable
        if [[ "$COMPOSABLE_REDFISH_EMULATOR" == "True" ]]; then
            register_composable_redfish_fabric
        fi
    fi

    if [[ "$1" == "unstack" ]]; then
        stop_composable
    fi

    if [[ "$1" == "clean" ]]; then
        cleanup_composable
    fi
fi

# Restore xtrace
$_XTRACE_COMPOSABLE
