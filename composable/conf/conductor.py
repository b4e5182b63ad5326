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

from oslo_config import cfg

group = cfg.OptGroup('conductor', title='Conductor options')

opts = [
    cfg.IntOpt('workers',
               default=16,
               min=1,
               help='Threads serving RPC requests in one conductor.'),
    cfg.IntOpt('heartbeat_interval',
               default=10,
               min=1,
               help='Seconds between two heartbeats a conductor writes to the '
                    'database.'),
    cfg.IntOpt('heartbeat_timeout',
               default=60,
               min=2,
               help='A conductor whose last heartbeat is older than this many '
                    'seconds is dead: its lease reservations are broken and '
                    'another conductor resumes its unfinished work. Must be '
                    'larger than heartbeat_interval.'),
    cfg.IntOpt('periodic_interval',
               default=30,
               min=1,
               help='Seconds between two runs of the periodic tasks (lease '
                    'start and expiry, taking over dead conductors\' work).'),
    cfg.IntOpt('node_check_interval',
               default=300,
               min=0,
               help='Seconds between two checks of the memory nodes: each '
                    'memory node agent reports its tmpfs area; a tmpfs '
                    'smaller than the registered capacity is logged, and '
                    'extent files no lease holds any more (left by an agent '
                    'killed mid-export) are scrubbed. 0 disables the '
                    'check.'),
    cfg.IntOpt('fabric_sync_interval',
               default=600,
               min=0,
               help='Seconds between two inventory syncs of the fabrics: '
                    'each enabled fabric driver reports the devices its '
                    'fabric holds; new devices join the fabric\'s pool of '
                    'their kind, devices that vanished, failed or were '
                    'bound outside composable go to maintenance or faulty '
                    '(a device held by a lease is never changed, only '
                    'reported), and what changed is logged. 0 disables the '
                    'sync.'),
    cfg.IntOpt('reconcile_interval',
               default=60,
               min=0,
               help='Seconds between two runs of the lease reconciler: it '
                    'retries the release (or unbind) of leases in error, '
                    'tears down what a failed bind left exported or '
                    'attached (the lease stays bind_failed), removes '
                    'iSCSI targets that memory nodes still serve for '
                    'extents the database says are not exported, and '
                    'scrubs orphan extent files. Each lease is handled '
                    'under its reservation, so every conductor may run '
                    'it. 0 disables the reconciler.'),
    cfg.IntOpt('reconcile_retry_backoff',
               default=60,
               min=0,
               help='Seconds the reconciler waits before it retries a '
                    'lease after its own first failed attempt; the wait '
                    'doubles with every further failure, up to '
                    'reconcile_retry_max_backoff. A lease that failed '
                    'because of a user request is retried at the next '
                    'run. Failed attempts are counted in the lease\'s '
                    'action log (action "reconcile").'),
    cfg.IntOpt('reconcile_retry_max_backoff',
               default=3600,
               min=0,
               help='The longest wait, in seconds, between two reconciler '
                    'attempts on the same lease.'),
    cfg.IntOpt('reservation_wait',
               default=10,
               min=0,
               help='Seconds an operation waits for another operation on the '
                    'same lease to finish before answering 409.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
