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

COMPOSABLE_PLUGIN_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source $COMPOSABLE_PLUGIN_DIR/lib/composable-selfcheck

function is_composable_enabled {
    is_service_enabled composable-api composable-conductor \
        composable-agent && return 0
    return 1
}

# install_composable - install composable and its Python requirements
function install_composable {
    if is_composable_compute; then
        # The compute extra: libvirt-python, for the compute-node agent
        # (Nova's libvirt set-up installs what it compiles against).
        setup_develop $COMPOSABLE_DIR compute
    else
        setup_develop $COMPOSABLE_DIR
    fi
    if is_service_enabled composable-api; then
        pip_install uwsgi
    fi
    if is_composable_memory_node; then
        install_composable_memory_data_plane
    fi
    if is_composable_compute && is_ubuntu; then
        # QEMU's iSCSI block driver: guest-mode memory is a disk QEMU
        # opens on the memory node's target itself.
        install_package qemu-block-extra
    fi
}

# Whether this host has a kernel iSCSI initiator: host-mode memory (swap
# on the LUN) needs one. Guest mode does not: QEMU opens the target with
# its own initiator. The kernel's iSCSI transport is reached through a
# NETLINK_ISCSI (8) socket, which a kernel without it refuses.
function composable_has_kernel_initiator {
    command -v iscsiadm >/dev/null || return 1
    python3 -c 'import socket; socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 8).close()' \
        2>/dev/null
}

function report_composable_initiator {
    if ! composable_has_kernel_initiator; then
        echo "composable: this host has no kernel iSCSI initiator: host-mode memory leases (composable:attach_mode=host) cannot attach here; guest-mode memory (QEMU's own initiator) and devices work"
    fi
}

# The memory data plane of a memory node: tgtd serves the tmpfs extents.
function is_composable_memory_node {
    is_service_enabled composable-agent && \
        [[ ",$COMPOSABLE_AGENT_ROLES," == *",memory_node,"* ]] && \
        [[ "$COMPOSABLE_MEMORY_EXPORTER" == "tgt" ]]
}

function install_composable_memory_data_plane {
    if is_fedora; then
        install_package scsi-target-utils
    else
        install_package tgt
    fi
}

function start_composable_memory_data_plane {
    local unit=tgt
    if is_fedora; then
        unit=tgtd
    fi
    sudo systemctl enable --now $unit
}

# The Nova compute host name of this host, as DevStack's wait_for_compute
# finds it: composable's host, memory node and agent use the same name.
function composable_compute_host {
    local host
    host=$(iniget $NOVA_CONF DEFAULT host)
    if [[ -z "$host" ]]; then
        host=$(hostname)
    fi
    echo $host
}

# configure_composable - write /etc/composable/composable.conf
function configure_composable {
    sudo install -d -o $STACK_USER -m 755 $COMPOSABLE_CONF_DIR
    rm -f $COMPOSABLE_CONF_FILE

    iniset $COMPOSABLE_CONF_FILE DEFAULT debug $ENABLE_DEBUG_LOG_LEVEL
    iniset $COMPOSABLE_CONF_FILE DEFAULT host "$(composable_compute_host)"
    iniset $COMPOSABLE_CONF_FILE DEFAULT auth_strategy keystone
    iniset $COMPOSABLE_CONF_FILE DEFAULT use_syslog $SYSLOG

    iniset $COMPOSABLE_CONF_FILE database connection \
        "$(database_connection_url composable)"

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
    if [[ "$COMPOSABLE_REDFISH_EMULATOR" == "True" ]]; then
        iniset $COMPOSABLE_CONF_FILE conductor fabric_sync_interval \
            $COMPOSABLE_FABRIC_SYNC_INTERVAL
    fi
    if [[ -n "$COMPOSABLE_PCI_BACKEND" ]]; then
        iniset $COMPOSABLE_CONF_FILE compute_node pci_backend \
            $COMPOSABLE_PCI_BACKEND
    fi
    # The agent runs as the DevStack user, who may write here.
    mkdir -p $COMPOSABLE_STATE_DIR
    iniset $COMPOSABLE_CONF_FILE compute_node pci_state_file \
        $COMPOSABLE_STATE_DIR/pci-devices.json

    # The agent's privileged helper runs from the same Python as the
    # agent (DevStack may install into a virtualenv sudo does not see).
    iniset $COMPOSABLE_CONF_FILE composable_sys_admin helper_command \
        "sudo $COMPOSABLE_BIN_DIR/privsep-helper --config-file $COMPOSABLE_CONF_FILE"

    # The memory this host lends, mounted by the agent when it starts.
    iniset $COMPOSABLE_CONF_FILE memory_node tmpfs_path $COMPOSABLE_TMPFS_PATH
    iniset $COMPOSABLE_CONF_FILE memory_node tmpfs_size_mb \
        $COMPOSABLE_TMPFS_SIZE_MB
    iniset $COMPOSABLE_CONF_FILE memory_node manage_mount True
    iniset $COMPOSABLE_CONF_FILE memory_node portal $COMPOSABLE_ISCSI_PORTAL
    iniset $COMPOSABLE_CONF_FILE compute_node initiator_iqn \
        "$(composable_initiator_iqn)"

    if is_service_enabled nova; then
        # composable's account in Nova and Placement, and Nova's
        # versioned notifications on the bus DevStack gives them.
        configure_keystoneauth $COMPOSABLE_CONF_FILE composable nova
        iniset $COMPOSABLE_CONF_FILE nova notifications_enabled True
        iniset $COMPOSABLE_CONF_FILE nova notifications_transport_url \
            "$(get_notification_url)"
        configure_keystoneauth $COMPOSABLE_CONF_FILE composable placement
    fi

    if is_service_enabled composable-api; then
        # The API under uWSGI, answering HTTP itself on its own port.
        write_uwsgi_config "$COMPOSABLE_UWSGI_CONF" "$COMPOSABLE_UWSGI" \
            "/" "$COMPOSABLE_SERVICE_HOST:$COMPOSABLE_SERVICE_PORT" \
            "composable-api"
    fi
}

# The initiator name composable's exports of this host are restricted to.
function composable_initiator_iqn {
    echo "iqn.2010-10.org.openstack.composable:$(composable_compute_host)"
}

# configure_nova_for_composable - what Nova needs to work with composable
# (doc/source/admin/nova.rst): the scheduler filter, and the [composable]
# account it and the extra spec validators reach the API with. The
# filter's name is in enabled_filters through NOVA_FILTERS (settings), and
# versioned notifications through NOVA_NOTIFICATION_FORMAT.
function configure_nova_for_composable {
    iniset_multiline $NOVA_CONF filter_scheduler available_filters \
        nova.scheduler.filters.all_filters \
        composable.nova.scheduler.ComposableFilter
    configure_keystoneauth $NOVA_CONF nova composable
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
    sudo install -d -o $STACK_USER -m 755 "$(dirname $socket)"
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
    # the "service" persona of composable's policy defaults.
    # The admin role too: composable reads the host of any server in Nova
    # and writes its pools as resource providers in Placement.
    create_service_user "composable" "admin"

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
    if is_composable_memory_node; then
        start_composable_memory_data_plane
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
    local password xtrace host
    host=$(composable_compute_host)
    xtrace=$(set +o | grep xtrace)
    set +o xtrace
    password=$(generate_hex_string 16)
    # Readable by the stack user only, before the password is in it.
    sudo install -m 600 -o $STACK_USER /dev/null \
        $COMPOSABLE_REDFISH_EMULATOR_CONF
    cat <<EOF | sudo tee $COMPOSABLE_REDFISH_EMULATOR_CONF >/dev/null
{"username": "composable", "password": "$password",
 "zones": [{"id": "1"}],
 "systems": [{"id": "$host", "name": "$host",
              "zones": ["1"]}],
 "blocks": [{"id": "GPU0", "kind": "gpu", "vendor_id": "10de",
             "device_id": "2330", "serial": "EMU-GPU-0",
             "model": "$COMPOSABLE_GPU_MODEL", "zones": ["1"]},
            {"id": "GPU1", "kind": "gpu", "vendor_id": "10de",
             "device_id": "2330", "serial": "EMU-GPU-1",
             "model": "$COMPOSABLE_GPU_MODEL", "zones": ["1"]}]}
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

# The emulator as the plugin's fabric, in the Nova host aggregate $1; the
# conductor's fabric sync then finds its GPUs (the GPU pool on that fabric
# takes them).
function register_composable_redfish_fabric {
    local aggregate_uuid=$1 password xtrace
    # The password stays out of the stack log.
    xtrace=$(set +o | grep xtrace)
    set +o xtrace
    password=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["password"])' \
        $COMPOSABLE_REDFISH_EMULATOR_CONF)
    openstack composable fabric create $COMPOSABLE_FABRIC_NAME \
        --driver redfish --aggregate-uuid $aggregate_uuid \
        --description "DevStack: the Redfish composition emulator" \
        --driver-info address=http://$COMPOSABLE_SERVICE_HOST:$COMPOSABLE_REDFISH_EMULATOR_PORT \
        --driver-info username=composable \
        --driver-info password=$password
    $xtrace
}

# Wait until the fabric sync put the emulator's GPUs in the GPU pool.
function wait_for_composable_redfish_gpus {
    local deadline=$((SECONDS + SERVICE_TIMEOUT + COMPOSABLE_FABRIC_SYNC_INTERVAL))
    while [[ $(openstack composable device list --pool $COMPOSABLE_GPU_POOL \
            -f value -c uuid | wc -l) -lt $COMPOSABLE_REDFISH_EMULATOR_GPUS ]]; do
        if [[ $SECONDS -ge $deadline ]]; then
            die $LINENO "the fabric sync did not put the Redfish emulator's GPUs in $COMPOSABLE_GPU_POOL"
        fi
        sleep 5
    done
}

# register_composable_inventory - what a first lease needs: a fabric
# whose Nova host aggregate holds this compute node (the pools' sharing
# providers in Placement join that aggregate), this host as a compute host
# and as the memory node of a memory pool, and a GPU pool: simulated GPUs
# on the fake fabric, or the Redfish emulator's. Only what is missing is
# made.
function register_composable_inventory {
    local compute_host aggregate_uuid i
    compute_host=$(composable_compute_host)
    if ! wait_for_compute $SERVICE_TIMEOUT; then
        die $LINENO "nova-compute of $compute_host did not register"
    fi

    if ! openstack aggregate show $COMPOSABLE_AGGREGATE >/dev/null 2>&1; then
        openstack aggregate create $COMPOSABLE_AGGREGATE
    fi
    if ! openstack aggregate show $COMPOSABLE_AGGREGATE -f value -c hosts \
            | grep -qw "$compute_host"; then
        openstack aggregate add host $COMPOSABLE_AGGREGATE $compute_host
    fi
    aggregate_uuid=$(openstack aggregate show $COMPOSABLE_AGGREGATE \
        -f value -c uuid)

    if ! openstack composable fabric show $COMPOSABLE_FABRIC_NAME \
            >/dev/null 2>&1; then
        if [[ "$COMPOSABLE_REDFISH_EMULATOR" == "True" ]]; then
            register_composable_redfish_fabric $aggregate_uuid
        else
            openstack composable fabric create $COMPOSABLE_FABRIC_NAME \
                --driver fake --aggregate-uuid $aggregate_uuid \
                --description "DevStack: simulated GPUs, memory of $compute_host"
        fi
    fi
    if ! openstack composable host show $compute_host >/dev/null 2>&1; then
        openstack composable host create $compute_host \
            --fabric $COMPOSABLE_FABRIC_NAME \
            --initiator-iqn "$(composable_initiator_iqn)"
    fi
    if ! openstack composable pool show $COMPOSABLE_MEMORY_POOL \
            >/dev/null 2>&1; then
        openstack composable pool create $COMPOSABLE_MEMORY_POOL \
            --kind memory --fabric $COMPOSABLE_FABRIC_NAME
    fi
    if ! openstack composable memory node show $compute_host \
            >/dev/null 2>&1; then
        openstack composable memory node create $compute_host \
            --pool $COMPOSABLE_MEMORY_POOL \
            --capacity ${COMPOSABLE_TMPFS_SIZE_MB}M \
            --exporter $COMPOSABLE_MEMORY_EXPORTER \
            --portal $COMPOSABLE_ISCSI_PORTAL --transport tcp
    fi
    if ! openstack composable pool show $COMPOSABLE_GPU_POOL \
            >/dev/null 2>&1; then
        openstack composable pool create $COMPOSABLE_GPU_POOL \
            --kind gpu --fabric $COMPOSABLE_FABRIC_NAME
    fi
    if [[ "$COMPOSABLE_REDFISH_EMULATOR" == "True" ]]; then
        wait_for_composable_redfish_gpus
        return
    fi
    for ((i = 0; i < COMPOSABLE_FAKE_GPUS; i++)); do
        if ! openstack composable device show devstack-gpu-$i \
                >/dev/null 2>&1; then
            openstack composable device create --pool $COMPOSABLE_GPU_POOL \
                --address devstack-gpu-$i --name devstack-gpu-$i \
                --model $COMPOSABLE_GPU_MODEL --vendor-id 10de \
                --product-id 0001
        fi
    done
}

# create_composable_flavors - sample flavors asking Placement for pooled
# capacity (the pools' sharing providers answer those resource classes)
function create_composable_flavors {
    if ! openstack flavor show $COMPOSABLE_MEMORY_FLAVOR >/dev/null 2>&1; then
        openstack flavor create $COMPOSABLE_MEMORY_FLAVOR \
            --ram 256 --disk 1 --vcpus 1 \
            --property resources:CUSTOM_COMPOSABLE_MEMORY_MB=2048 \
            --property composable:attach_mode=guest
    fi
    if ! openstack flavor show $COMPOSABLE_GPU_FLAVOR >/dev/null 2>&1; then
        openstack flavor create $COMPOSABLE_GPU_FLAVOR \
            --ram 256 --disk 1 --vcpus 1 \
            --property resources:CUSTOM_COMPOSABLE_GPU=1 \
            --property composable:gpu_model=$COMPOSABLE_GPU_MODEL
    fi
}

# verify_composable - the self-check (lib/composable-selfcheck): a server
# with the memory flavor, a lease-first boot and a GPU lease bound to this
# host. A failure stops stack.sh with what went wrong.
function verify_composable {
    composable_selfcheck "$(composable_compute_host)"
}

# The openstack client as DevStack's admin (clouds.yaml), also where
# openrc set the demo user's variables (unstack.sh sources it).
function composable_admin_openstack {
    (
        for var in $(compgen -v OS_); do
            unset "$var"
        done
        export OS_CLOUD=devstack-admin
        openstack "$@"
    )
}

# Remove the Nova objects and the catalog entry the plugin made. Run at
# unstack, while the APIs still answer (DevStack stops them after the
# plugins' unstack phase).
function cleanup_composable_inventory {
    local compute_host flavor
    compute_host=$(composable_compute_host)
    for flavor in $COMPOSABLE_MEMORY_FLAVOR $COMPOSABLE_GPU_FLAVOR; do
        composable_admin_openstack flavor delete $flavor 2>/dev/null || true
    done
    if composable_admin_openstack aggregate show $COMPOSABLE_AGGREGATE \
            >/dev/null 2>&1; then
        composable_admin_openstack aggregate remove host \
            $COMPOSABLE_AGGREGATE $compute_host >/dev/null 2>&1 || true
        composable_admin_openstack aggregate delete $COMPOSABLE_AGGREGATE \
            || true
    fi
}

function cleanup_composable_accounts {
    # Deleting the service deletes its endpoints.
    composable_admin_openstack service delete composable 2>/dev/null || true
}

# composable's targets left in tgtd, and the tmpfs.
function cleanup_composable_memory_data_plane {
    local tid
    if command -v tgtadm >/dev/null; then
        for tid in $(sudo tgtadm --lld iscsi --mode target --op show 2>/dev/null | \
                awk -v prefix="$COMPOSABLE_TARGET_PREFIX" \
                    '$1 == "Target" && index($3, prefix) == 1 {sub(":", "", $2); print $2}'); do
            sudo tgtadm --lld iscsi --mode target --op delete --force \
                --tid $tid || true
        done
    fi
    if mountpoint -q $COMPOSABLE_TMPFS_PATH; then
        sudo umount $COMPOSABLE_TMPFS_PATH
    fi
}

# The database, dropped as DevStack's recreate_database makes it.
# unstack.sh sources lib/database before openrc reads local.conf, so no
# backend is selected there yet (DATABASE_TYPE is empty): select it from
# the enabled services as stack.sh does.
function drop_composable_database {
    if [[ -z "$DATABASE_TYPE" ]]; then
        initialize_database_backends || return 0
    fi
    case "$DATABASE_TYPE" in
        mysql)
            mysql -u$DATABASE_USER -p$DATABASE_PASSWORD -h$MYSQL_HOST \
                -e "DROP DATABASE IF EXISTS composable;" ;;
        postgresql)
            dropdb -h$DATABASE_HOST -U$DATABASE_USER --if-exists \
                composable ;;
        *)
            return 0 ;;
    esac && echo "composable: database composable dropped"
}

# stop_composable - stop the services
function stop_composable {
    local serv
    for serv in composable-api composable-conductor composable-agent \
            composable-redfish-emulator; do
        stop_process $serv
    done
}

# unstack_composable - the plugin's Nova objects and catalog entry (while
# the APIs answer), the services, composable's targets in tgtd and the
# tmpfs. For clean.sh (unstack.sh --all) also the database, while the
# database server still runs.
function unstack_composable {
    if is_service_enabled nova && [[ "$COMPOSABLE_REGISTER_INVENTORY" == "True" ]]; then
        cleanup_composable_inventory
    fi
    if is_service_enabled keystone; then
        cleanup_composable_accounts
    fi
    stop_composable
    if is_composable_memory_node; then
        cleanup_composable_memory_data_plane
    fi
    if [[ -n "$UNSTACK_ALL" ]]; then
        drop_composable_database || true
    fi
}

# cleanup_composable - remove the files the plugin left behind
function cleanup_composable {
    if is_service_enabled composable-api; then
        remove_uwsgi_config "$COMPOSABLE_UWSGI_CONF" "composable-api"
    fi
    sudo rm -f $COMPOSABLE_REDFISH_EMULATOR_CONF
    if is_composable_memory_node; then
        cleanup_composable_memory_data_plane
    fi
    if [[ -x $COMPOSABLE_BIN_DIR/composable-libvirt-hook ]]; then
        sudo $COMPOSABLE_BIN_DIR/composable-libvirt-hook --uninstall
    fi
    sudo rm -rf $COMPOSABLE_CONF_DIR $COMPOSABLE_STATE_DIR
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
        if is_service_enabled nova; then
            configure_nova_for_composable
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
        if is_composable_compute && \
                [[ "$COMPOSABLE_MEMORY_EXPORTER" != "noop" ]]; then
            report_composable_initiator
        fi
        if is_service_enabled nova && \
                [[ "$COMPOSABLE_REGISTER_INVENTORY" == "True" ]]; then
            register_composable_inventory
            create_composable_flavors
            echo "composable: boot a server with pooled memory with"
            echo "  openstack server create --flavor $COMPOSABLE_MEMORY_FLAVOR --image $DEFAULT_IMAGE_NAME --network $PRIVATE_NETWORK_NAME my-server"
            echo "  openstack composable lease list"
        fi
    elif [[ "$1" == "stack" && "$2" == "test-config" ]]; then
        if is_service_enabled nova && \
                [[ "$COMPOSABLE_REGISTER_INVENTORY" == "True" && \
                   "$COMPOSABLE_VERIFY" == "True" ]]; then
            verify_composable
        fi
    fi

    if [[ "$1" == "unstack" ]]; then
        unstack_composable
    fi

    if [[ "$1" == "clean" ]]; then
        cleanup_composable
    fi
fi

# Restore xtrace
$_XTRACE_COMPOSABLE
