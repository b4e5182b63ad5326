#!/usr/bin/env python3
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

"""What the composable libvirt hook adds to the start of a domain.

libvirtd forks the hook for every start (and stop) of every domain on a
compute node and waits for it, so its whole run time is added to the
start. This runs the installed hook (the launcher ``composable-libvirt-hook
--install`` writes, ``python3 -I -S``) N times the way libvirtd does: four
arguments, a realistic Nova domain XML on stdin (Nova 34's metadata,
about 5 KB), a cleaned environment, and times each run from fork to exit.

The agent's socket is either an agent that runs (``--socket``, e.g. a
composable-agent with the compute_node role), or, by default, an agent
started in this process: the real hook server (composable.agent.
hook_server) of a real AgentManager, whose conductor is a stand-in that
answers at once; it knows one instance with a lease.

Lines printed:

* ``python -I -S`` alone, for scale (what any Python hook costs);
* ``prepare`` of an instance with a lease (the agent asks the conductor;
  here the stand-in answers at once, so this is the hook and socket
  round trip, not the bind: no data plane);
* last, ``prepare`` of an instance without lease, the case every domain
  of a host pays:

  libvirt_hook: p50_ms=... p99_ms=... leases=0

Usage: tools/bench/libvirt_hook.py [--runs 200] [--socket PATH]
                                   [--hook PATH]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                '..', '..')))

from composable.hooks import libvirt as hook  # noqa: E402
from tests.functional import leftovers  # noqa: E402
from tests.functional.hooks import nova_domain  # noqa: E402

LEASED = str(uuid.uuid4())
LEASE = str(uuid.uuid4())
FLAVOR = {'hw:cpu_policy': 'shared', 'hw:mem_page_size': 'small',
          'quota:disk_read_iops_sec': '2000'}


class InstantConductor(object):
    """The conductor's side, answering at once: one instance has a lease,
    and binding it is immediate."""

    def instance_leases(self, context, host):
        return {LEASED: [LEASE]}

    def prepare_instance(self, context, instance_uuid, host, **kwargs):
        return {'ok': True, 'message': '',
                'leases': [{'uuid': LEASE, 'status': 'bound',
                            'host': host, 'attach_mode': 'host'}]}

    def release_instance(self, context, instance_uuid, host, **kwargs):
        return {'ok': True, 'message': '', 'leases': []}

    def instance_status(self, context, instance_uuid, host=None):
        return []


def start_agent(path):
    from composable.agent import hook_server
    from composable.agent import manager
    agent = manager.AgentManager('compute-bench', ['compute_node'],
                                 simulate=True)
    server = hook_server.HookServer(agent.parts, path=path, group='',
                                    conductor=InstantConductor(),
                                    refresh_interval=0)
    agent.hook_server = server
    server.start()
    server.refresh()
    return server


def time_runs(argv, stdin, env, runs):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        result = subprocess.run(argv, input=stdin, env=env,
                                capture_output=True)
        times.append((time.perf_counter() - start) * 1000.0)
        if result.returncode:
            raise SystemExit('%s failed (%d): %s' % (
                ' '.join(argv), result.returncode,
                result.stderr.decode(errors='replace')))
    return times


def percentiles(times):
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1,
                      int(round(0.99 * (len(ordered) - 1))))]
    return statistics.median(ordered), p99


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--runs', type=int, default=200)
    parser.add_argument('--socket',
                        help='the socket of a running agent (default: an '
                             'agent started here)')
    parser.add_argument('--hook',
                        help='an installed hook (default: the launcher '
                             'installed into a temporary directory)')
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix='composable-hook-bench-')
    server = None
    path = args.socket
    if path is None:
        path = os.path.join(work, 'hook.sock')
        server = start_agent(path)
    hook_path = args.hook
    if hook_path is None:
        hook_path = os.path.join(work, 'qemu.d', '50-composable')
        with open(os.devnull, 'w') as devnull:
            hook.install(['--install', '--hook', hook_path,
                          '--config-file', os.path.join(work, 'none.conf')],
                         devnull)
    # libvirtd passes a handful of variables only (virCommandAddEnvPass-
    # Common); the socket is named here the way tests and tools may.
    env = {'PATH': '/usr/sbin:/usr/bin:/sbin:/bin', 'LC_ALL': 'C',
           hook.ENV_SOCKET: path}
    try:
        base = time_runs([sys.executable, '-I', '-S', '-c', 'pass'], b'',
                         env, args.runs)
        p50, p99 = percentiles(base)
        print('python -I -S alone: p50_ms=%.1f p99_ms=%.1f' % (p50, p99))

        leased = nova_domain.realistic_domain(
            LEASED, extra_specs=FLAVOR).encode()
        times = time_runs([hook_path, 'instance-0000002a', 'prepare',
                           'begin', '-'], leased, env, args.runs)
        p50, p99 = percentiles(times)
        print('libvirt_hook prepare with a lease (conductor answering at '
              'once%s): p50_ms=%.1f p99_ms=%.1f leases=1' % (
                  '' if server is not None else '?', p50, p99))

        # Another instance each time, as on a host starting many.
        times = []
        for _ in range(args.runs):
            xml = nova_domain.realistic_domain(
                str(uuid.uuid4()), extra_specs=FLAVOR).encode()
            times.extend(time_runs([hook_path, 'instance-0000002b',
                                    'prepare', 'begin', '-'], xml, env, 1))
        p50, p99 = percentiles(times)
        print('libvirt_hook: p50_ms=%.1f p99_ms=%.1f leases=0' % (p50, p99))
    finally:
        if server is not None:
            server.stop()
        import shutil
        shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    # Whatever the run leaves on the machine (mounts, targets, guests,
    # processes, databases) fails it, and is removed.
    with leftovers.guard():
        rc = main()
    sys.exit(rc)
