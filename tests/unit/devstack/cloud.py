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

"""The ``openstack`` stand-in of the DevStack plugin tests.

``cloud.py CLOUD_DIR <openstack arguments>``: answers the commands the
plugin runs from the objects under CLOUD_DIR/objects/<kind>/<name>
(``show`` fails for a missing object, as the real client does). The
server the check boots gets a lease whose status is read from
CLOUD_DIR/lease-status (default ``bound``).
"""

import json
import os
import sys

SERVER_ID = 'server-1'
LEASE_ID = 'lease-1'


def _path(cloud, kind, name):
    return os.path.join(cloud, 'objects', kind, name)


def _exists(cloud, kind, name):
    return os.path.exists(_path(cloud, kind, name))


def _save(cloud, kind, name, body):
    os.makedirs(os.path.dirname(_path(cloud, kind, name)), exist_ok=True)
    with open(_path(cloud, kind, name), 'w') as f:
        json.dump(body, f)


def _load(cloud, kind, name):
    with open(_path(cloud, kind, name)) as f:
        return json.load(f)


def _option(args, name):
    return args[args.index(name) + 1] if name in args else None


def _positionals(args):
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg.startswith('--') or arg in ('-f', '-c'):
            skip = arg not in ('--wait', '--all-projects', '--long')
        else:
            out.append(arg)
    return out


def main(argv):
    cloud, args = argv[0], argv[1:]
    if args[0] == 'composable':
        args = args[1:]
        if args[:2] == ['memory', 'node']:
            args = ['memory-node'] + args[2:]
    kind, verb, rest = args[0], args[1], args[2:]
    if kind == 'aggregate' and verb in ('add', 'remove'):
        name, host = _positionals(rest[1:])
        body = _load(cloud, kind, name)
        hosts = set(body['hosts'])
        (hosts.add if verb == 'add' else hosts.discard)(host)
        body['hosts'] = sorted(hosts)
        _save(cloud, kind, name, body)
        return 0
    if kind == 'lease' and verb == 'list':
        leases = []
        if _exists(cloud, 'server', SERVER_ID):
            status = 'bound'
            if os.path.exists(os.path.join(cloud, 'lease-status')):
                with open(os.path.join(cloud, 'lease-status')) as f:
                    status = f.read().strip()
            leases.append({'UUID': LEASE_ID, 'Status': status,
                           'Instance UUID': SERVER_ID})
        print(json.dumps(leases))
        return 0
    if kind == 'lease' and verb == 'show':
        print('fault: the stand-in cloud says so')
        return 0
    names = _positionals(rest)
    if kind == 'device' and verb == 'create':
        names = [_option(rest, '--name')]
    name = names[0] if names else None
    if kind == 'server' and verb == 'create':
        _save(cloud, kind, SERVER_ID, {
            'name': name, 'args': rest,
            'OS-EXT-SRV-ATTR:instance_name': 'instance-00000001'})
        print(SERVER_ID)
        return 0
    if verb == 'show':
        if not _exists(cloud, kind, name):
            print('No %s with a name or ID of %s exists.' % (kind, name),
                  file=sys.stderr)
            return 1
        body = _load(cloud, kind, name)
        column = _option(rest, '-c')
        if column:
            value = body.get(column, '')
            print(' '.join(value) if isinstance(value, list) else value)
        return 0
    if verb == 'create':
        if _exists(cloud, kind, name):
            print('%s %s exists' % (kind, name), file=sys.stderr)
            return 1
        body = {'args': rest}
        if kind == 'aggregate':
            body.update(uuid='aggregate-uuid-1', hosts=[])
        _save(cloud, kind, name, body)
        return 0
    if verb == 'delete':
        if not _exists(cloud, kind, name):
            return 1
        os.unlink(_path(cloud, kind, name))
        return 0
    print('the stand-in cloud does not know: %s' % ' '.join(args),
          file=sys.stderr)
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
