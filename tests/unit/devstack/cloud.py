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
CLOUD_DIR/lease-status (default ``bound``) when the server's flavor asks
for pooled memory. Leases made with ``lease create`` are reserved; a
server booted with ``--hint composable_lease=<lease>`` binds its lease
(unless CLOUD_DIR/hint-lease-status says otherwise) and unbinds it when
deleted; ``lease bind --host`` binds one to a host; ``lease delete``
releases it. ``pool show -c used`` answers how many leases made with
``--pool <pool>`` are not released, plus one once such a lease was
deleted if CLOUD_DIR/pool-leak-<pool> exists (a pool whose usage does not
return).
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


def _read(cloud, name, default=''):
    path = os.path.join(cloud, name)
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return f.read().strip()


def _lease(cloud, ident):
    """The lease made with ``lease create`` named or numbered ident."""
    for name in (os.listdir(os.path.join(cloud, 'objects', 'lease'))
                 if _exists(cloud, 'lease', '') else []):
        body = _load(cloud, 'lease', name)
        if ident in (name, body['uuid']):
            return name, body
    return None, None


def _pool_used(cloud, pool):
    used = deleted = 0
    for name in (os.listdir(os.path.join(cloud, 'objects', 'lease'))
                 if _exists(cloud, 'lease', '') else []):
        body = _load(cloud, 'lease', name)
        if _option(body['args'], '--pool') != pool:
            continue
        if body['status'] == 'released':
            deleted += 1
        else:
            used += 1
    if deleted and os.path.exists(os.path.join(cloud, 'pool-leak-' + pool)):
        used += 1
    return used


def _leases(cloud, args):
    verb, rest = args[1], args[2:]
    if verb == 'create':
        name = _positionals(rest)[0]
        body = {'uuid': 'lease-%s' % name, 'status': 'reserved',
                'host': '', 'args': rest}
        _save(cloud, 'lease', name, body)
        print(body['uuid'])
        return 0
    name, body = _lease(cloud, _positionals(rest)[-1])
    if body is None:
        print('No lease %s' % _positionals(rest)[-1], file=sys.stderr)
        return 1
    if verb == 'show':
        column = _option(rest, '-c')
        print(body.get(column, '') if column else
              'fault: the stand-in cloud says so')
    elif verb == 'bind':
        body.update(status='bound', host=_option(rest, '--host'))
    elif verb == 'delete':
        body['status'] = 'released'
    _save(cloud, 'lease', name, body)
    return 0


def main(argv):
    cloud, args = argv[0], argv[1:]
    if args[0] == 'composable':
        args = args[1:]
        if args[:2] == ['memory', 'node']:
            args = ['memory-node'] + args[2:]
        if args[0] == 'lease' and args[1] != 'list' and (
                args[1] != 'show' or _lease(
                    cloud, _positionals(args[2:])[-1])[1] is not None):
            return _leases(cloud, args)
        if args[:2] == ['pool', 'show'] and _option(args, '-c') == 'used':
            print(_pool_used(cloud, _positionals(args[2:])[0]))
            return 0
        if args[:2] == ['device', 'list']:
            for name in (sorted(os.listdir(os.path.join(
                    cloud, 'objects', 'device')))
                    if _exists(cloud, 'device', '') else []):
                print(name)
            return 0
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
        if _exists(cloud, 'server', SERVER_ID) and 'composable.mem2g' in \
                _load(cloud, 'server', SERVER_ID)['args']:
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
        hint = _option(rest, '--hint')
        if hint:
            lease_name, lease = _lease(cloud, hint.split('=', 1)[1])
            lease['status'] = _read(cloud, 'hint-lease-status', 'bound')
            _save(cloud, 'lease', lease_name, lease)
        print(SERVER_ID)
        return 0
    if kind == 'server' and verb == 'delete' and _exists(
            cloud, kind, SERVER_ID) and SERVER_ID in rest:
        hint = _option(_load(cloud, kind, SERVER_ID)['args'], '--hint')
        if hint:
            lease_name, lease = _lease(cloud, hint.split('=', 1)[1])
            lease['status'] = 'reserved'
            _save(cloud, 'lease', lease_name, lease)
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
