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

"""OS::Composable::Lease in Heat's own test harness.

The schema, validation and loading tests need only Heat. The life-cycle
tests drive whole stacks (create, update, check, suspend, resume, delete)
through Heat's engine code against a real composable API
(tests/heat/standalone.py); nothing of composable is mocked there.
"""

import datetime
import os
import sys
import uuid

from heat.common import exception
from heat.common import template_format
from heat.engine import clients
from heat.engine import environment
from heat.engine import plugin_manager
from heat.engine import properties
from heat.engine import resource
from heat.engine import resources
from heat.engine import scheduler
from heat.engine import service
from heat.engine import stack as heat_stack
from heat.engine import support
from heat.engine import template as heat_template
from heat.tests import common
from heat.tests import utils
from oslo_config import cfg

import composable.heat
from composable.heat import client as heat_client
from composable.heat import lease
from tests.heat import standalone

COMPOSABLE = None

DEADLINE_MINUTES = 10

SAMPLE_TEMPLATE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))),
    'etc', 'heat', 'composable-leases.yaml')


def setUpModule():
    global COMPOSABLE
    COMPOSABLE = standalone.Composable()
    COMPOSABLE.start()


def tearDownModule():
    if COMPOSABLE is not None:
        COMPOSABLE.stop()


def _in(days):
    return (datetime.datetime.utcnow() +
            datetime.timedelta(days=days)).strftime('%Y-%m-%dT%H:%M:%SZ')


def _sample():
    with open(SAMPLE_TEMPLATE) as f:
        return template_format.parse(f.read())


def _template(**leases):
    resources_ = {}
    for name, props in leases.items():
        resources_[name] = {'type': 'OS::Composable::Lease',
                            'properties': props}
    return {'heat_template_version': '2021-04-16', 'resources': resources_}


class LeaseTestCase(common.HeatTestCase):

    def setUp(self):
        # Heat's harness looks for Heat's etc/ in a source tree; an
        # installed Heat has it under its environment's prefix.
        etc = os.path.join(sys.prefix, 'etc', 'heat')
        cfg.CONF.set_override('environment_dir',
                              os.path.join(etc, 'environment.d'))
        cfg.CONF.set_override('template_dir', os.path.join(etc, 'templates'))
        super(LeaseTestCase, self).setUp()
        resource._register_class('OS::Composable::Lease', lease.Lease)
        self.project_id = uuid.uuid4().hex

    def _stack(self, template, endpoint=None):
        """A stack of ``template`` whose user is a member of this test's
        own project of the standalone composable."""
        stack = utils.parse_stack(template)
        self._authenticate(stack, endpoint)
        return stack

    def _updated(self, template, params=None):
        """The new definition of a stack for Stack.update() (not stored,
        as heat-engine does it)."""
        ctx = utils.dummy_context()
        new = heat_stack.Stack(ctx, 'updated_stack', heat_template.Template(
            template, env=environment.Environment(params or {})))
        self._authenticate(new)
        return new

    def _authenticate(self, stack, endpoint=None):
        stack.context._auth_plugin = standalone.StandaloneAuth(
            endpoint or COMPOSABLE.endpoint, self.project_id)


class TestLeaseSchema(LeaseTestCase):
    """Loading, schema, docs and validation: Heat alone."""

    def test_plugin_dirs_load_the_resource_type(self):
        # How heat-engine finds it: plugin_dirs naming the package folder.
        cfg.CONF.set_override('plugin_dirs',
                              [os.path.dirname(composable.heat.__file__)])
        manager = plugin_manager.PluginManager()
        mapping = plugin_manager.PluginMapping('resource').load_all(manager)
        types = dict(mapping)
        self.assertIn('OS::Composable::Lease', types)
        self.assertEqual('Lease', types['OS::Composable::Lease'].__name__)

    def test_client_plugin_and_constraint_come_from_entry_points(self):
        ctx = utils.dummy_context()
        plugin = clients.Clients(ctx).client_plugin('composable')
        self.assertIsInstance(plugin, heat_client.ComposableClientPlugin)
        self.assertEqual(['composable'], plugin.service_types)
        constraint = resources.global_env().get_constraint('composable.pool')
        self.assertIs(heat_client.PoolConstraint, constraint)

    def test_resource_schema_and_template_render(self):
        stack = self._stack(_template())
        engine = service.EngineService('heat-test-host', 'engine')
        schema = engine.resource_schema(stack.context,
                                        'OS::Composable::Lease',
                                        with_description=True)
        self.assertEqual('OS::Composable::Lease', schema['resource_type'])
        self.assertEqual(set(lease.Lease.PROPERTIES),
                         set(schema['properties']))
        for name, prop in schema['properties'].items():
            self.assertTrue(prop.get('description'), name)
        self.assertTrue(schema['properties']['end']['update_allowed'])
        self.assertFalse(schema['properties']['memory']['update_allowed'])
        for name in ('id', 'status', 'extents', 'devices', 'host', 'show'):
            self.assertTrue(schema['attributes'][name]['description'], name)
        self.assertEqual(support.SUPPORTED,
                         schema['support_status']['status'])
        self.assertIn('composable', schema['support_status']['message'])
        self.assertIn('A lease of pooled memory', schema['description'])
        hot = engine.generate_template(stack.context,
                                       'OS::Composable::Lease', 'hot')
        lease_def = hot['resources']['Lease']
        self.assertEqual('OS::Composable::Lease', lease_def['type'])
        self.assertEqual(set(lease.Lease.PROPERTIES),
                         set(lease_def['properties']))
        self.assertEqual('number', hot['parameters']['memory']['type'])
        self.assertIn('status', hot['outputs'])

    def test_resource_type_unavailable_without_catalog_entry(self):
        stack = utils.parse_stack(_template())
        # A catalog without the composable service type.
        stack.context._auth_plugin = standalone.StandaloneAuth(
            None, self.project_id)
        engine = service.EngineService('heat-test-host', 'engine')
        self.assertRaises(exception.ResourceTypeUnavailable,
                          engine.resource_schema, stack.context,
                          'OS::Composable::Lease')

    def _invalid(self, props, message):
        stack = self._stack(_template(lease=props))
        error = self.assertRaises((exception.StackValidationFailed,
                                   exception.PropertyUnspecifiedError,
                                   exception.ResourcePropertyConflict),
                                  stack['lease'].validate)
        self.assertIn(message, str(error))

    def test_validation_refuses_bad_leases(self):
        self._invalid({'name': 'nothing'}, 'At least one of the following '
                      'properties must be specified: memory, gpu_count, '
                      'device_count')
        self._invalid({'memory': 1024, 'host': 'compute-0',
                       'server': 'vm-1'},
                      'Cannot define the following properties at the same '
                      'time: server, host')
        self._invalid({'gpu_count': 1, 'device_count': 2},
                      'gpu_count, device_count')
        self._invalid({'gpu_count': 1, 'device_kind': 'nvme'},
                      'gpu_count asks for GPUs but device_kind is nvme')
        self._invalid({'memory': 1024, 'gpu_model': 'A100'},
                      'give gpu_count or device_count too')
        self._invalid({'memory': 1024, 'attach_mode': 'guest'},
                      'attach_mode guest attaches to a server')
        self._invalid({'memory': 1024, 'attach_mode': 'virtio-mem'},
                      'attach_mode virtio-mem attaches to a server')
        self._invalid({'memory': 1024, 'end': 'next tuesday'},
                      "Property end: 'next tuesday' is not an ISO 8601 time")
        self._invalid({'memory': 1024, 'start': _in(2), 'end': _in(1)},
                      'must be after its start')
        self._invalid({'memory': 1024, 'start': _in(1),
                       'host': 'compute-0'},
                      'cannot be bound when it is created')
        self._invalid({'memory': 0}, 'memory')
        self._invalid({'memory': 1024, 'attach_mode': 'disk'}, 'disk')

    def test_elastic_needs_memory_and_its_limits(self):
        self._invalid({'gpu_count': 1,
                       'elastic': {'min_mb': 1024, 'max_mb': 4096}},
                      'elastic makes a memory lease elastic: give memory')
        self._invalid({'memory': 1024, 'elastic': {'min_mb': 1024}},
                      'max_mb')
        self._invalid({'memory': 1024, 'device_kind': 'nvme',
                       'device_traits': ['X']},
                      'give gpu_count or device_count too')

    def test_elastic_is_sent_with_the_window_defaults(self):
        stack = self._stack(_template(lease={
            'memory': 2048, 'elastic': {'min_mb': 1024, 'max_mb': 4096}}))
        rsrc = stack['lease']
        self.assertIsNone(rsrc.validate())
        self.assertEqual({'min_mb': 1024, 'max_mb': 4096,
                          'observation_window': 300,
                          'prediction_window': 60},
                         rsrc._lease_fields()['elastic'])
        # A new policy is a new lease: the API does not change it.
        self.assertFalse(rsrc.properties_schema['elastic'].update_allowed)

    def test_named_devices_alone_make_a_lease(self):
        device = str(uuid.uuid4())
        stack = self._stack(_template(lease={'device_uuids': [device],
                                             'device_traits': ['CUSTOM_X']}))
        rsrc = stack['lease']
        self.assertIsNone(rsrc.validate())
        fields = rsrc._lease_fields()
        self.assertEqual(([device], ['CUSTOM_X']),
                         (fields['device_uuids'], fields['device_traits']))

    def test_surface_matrix_reads_the_schema_heat_loads(self):
        # composable.api.surfaces reads the resource with ast (where Heat
        # is not installed); here it must agree with Heat's own schema.
        from composable.api import surfaces

        def flatten(schema, prefix=''):
            found = {}
            for name, prop in schema.items():
                found[prefix + name] = bool(prop.update_allowed)
                if prop.type == prop.MAP and prop.schema:
                    found.update(flatten(prop.schema, prefix + name + '.'))
            return found

        real = properties.schemata(lease.Lease.properties_schema)
        read = surfaces.heat_schema('OS::Composable::Lease')
        self.assertEqual(flatten(real), read.properties)
        self.assertIn('elastic.headroom', read.properties)
        # Heat's engine adds its own "show" to the class's attributes.
        self.assertEqual(set(lease.Lease.attributes_schema) - {'show'},
                         read.attributes)

    def test_a_valid_lease_validates(self):
        stack = self._stack(_template(lease={
            'memory': 1024, 'gpu_count': 1, 'gpu_model': 'FakeGPU-16G',
            'host': 'compute-0', 'end': _in(1)}))
        self.assertIsNone(stack['lease'].validate())

    def test_null_and_empty_values_are_not_sent(self):
        stack = self._stack(_template(lease={
            'memory': 1024, 'pools': [], 'device_kind': '', 'gpu_model': None,
            'end': None, 'server': None, 'host': ''}))
        rsrc = stack['lease']
        self.assertIsNone(rsrc.validate())
        self.assertEqual({'memory_mb': 1024,
                          'name': rsrc.physical_resource_name()},
                         rsrc._lease_fields())
        self.assertIsNone(rsrc._target(rsrc.properties))

    def test_server_in_the_template_is_a_dependency(self):
        template = _template(lease={'memory': 1024,
                                    'server': {'get_resource': 'server'}})
        template['resources']['server'] = {
            'type': 'OS::Nova::Server',
            'properties': {'image': 'cirros', 'flavor': 'm1.tiny'}}
        stack = self._stack(template)
        required = list(stack.dependencies.requires(stack['lease']))
        self.assertEqual([stack['server']], required)


class TestLeaseAgainstComposable(LeaseTestCase):
    """Stacks of leases created, changed and deleted in a real composable.
    """

    def setUp(self):
        super(TestLeaseAgainstComposable, self).setUp()
        # Heat's harness turns its task scheduler's sleeps off; here the
        # resource polls a real service, once a second as in heat-engine.
        scheduler.ENABLE_SLEEP = True

    def _leases(self, **params):
        resp = COMPOSABLE.get('leases', self.project_id, **params)
        self.assertEqual(200, resp.status_code, resp.text)
        return resp.json()['leases']

    def _lease(self, ident):
        resp = COMPOSABLE.get('leases/%s' % ident, self.project_id)
        self.assertEqual(200, resp.status_code, resp.text)
        return resp.json()

    def _pool(self, name):
        resp = COMPOSABLE.get('pools/%s' % name, self.project_id)
        self.assertEqual(200, resp.status_code, resp.text)
        return resp.json()

    def _create(self, template):
        stack = self._stack(template)
        stack.timeout_mins = DEADLINE_MINUTES
        self.addCleanup(self._delete_quietly, stack)
        stack.create()
        return stack

    def _delete_quietly(self, stack):
        # Leaves nothing behind in the service when a test fails midway.
        if stack.state != (stack.DELETE, stack.COMPLETE):
            stack.delete()

    def _assert_gone(self, stack, lease_ids):
        stack.delete()
        self.assertEqual((stack.DELETE, stack.COMPLETE), stack.state,
                         stack.status_reason)
        listed = set(x['uuid'] for x in self._leases())
        self.assertEqual(set(), listed & set(lease_ids))
        for lease_id in lease_ids:
            resp = COMPOSABLE.get('leases/%s' % lease_id, self.project_id)
            if resp.status_code != 404:
                self.assertEqual('released', resp.json()['status'])

    def test_memory_lease_reaches_reserved_and_delete_returns_it(self):
        free_before = self._pool('memory-pool')['free']
        stack = self._create(_template(mem={'name': 'heat-mem',
                                            'memory': 1024,
                                            'end': _in(1)}))
        self.assertEqual((stack.CREATE, stack.COMPLETE), stack.state,
                         stack.status_reason)
        rsrc = stack['mem']
        found = self._lease(rsrc.resource_id)
        self.assertEqual('reserved', found['status'])
        self.assertEqual(1024, found['memory_mb'])
        self.assertEqual('heat-mem', found['name'])
        self.assertEqual(rsrc.resource_id, rsrc.FnGetAtt('id'))
        self.assertEqual('reserved', rsrc.FnGetAtt('status'))
        self.assertEqual(1024, sum(e['size_mb']
                                   for e in rsrc.FnGetAtt('extents')))
        self.assertEqual([], rsrc.FnGetAtt('devices'))
        self.assertIsNone(rsrc.FnGetAtt('host'))
        self.assertEqual(rsrc.resource_id, rsrc.FnGetAtt('show')['uuid'])
        self.assertEqual(free_before - 1024,
                         self._pool('memory-pool')['free'])
        self._assert_gone(stack, [rsrc.resource_id])
        self.assertEqual([], self._leases())
        self.assertEqual(free_before, self._pool('memory-pool')['free'])

    def test_gpu_lease_bound_to_host_checks_suspends_and_resumes(self):
        stack = self._create(_template(gpu={
            'gpu_count': 1, 'gpu_model': 'FakeGPU-16G',
            'pools': ['gpu-pool'], 'host': 'compute-0'}))
        self.assertEqual((stack.CREATE, stack.COMPLETE), stack.state,
                         stack.status_reason)
        rsrc = stack['gpu']
        self.assertEqual('bound', self._lease(rsrc.resource_id)['status'])
        self.assertEqual('compute-0', rsrc.FnGetAtt('host'))
        devices = rsrc.FnGetAtt('devices')
        self.assertEqual(['FakeGPU-16G'], [d['model'] for d in devices])
        # Projects never see where a device sits on the fabric.
        self.assertNotIn('address', devices[0])

        stack.check()
        self.assertEqual((stack.CHECK, stack.COMPLETE), stack.state,
                         stack.status_reason)

        stack.suspend()
        self.assertEqual((stack.SUSPEND, stack.COMPLETE), stack.state,
                         stack.status_reason)
        found = self._lease(rsrc.resource_id)
        self.assertEqual('reserved', found['status'])
        self.assertEqual(1, len(found['devices']))
        stack.resume()
        self.assertEqual((stack.RESUME, stack.COMPLETE), stack.state,
                         stack.status_reason)
        found = self._lease(rsrc.resource_id)
        self.assertEqual('bound', found['status'])
        self.assertEqual('compute-0', found['host'])
        self._assert_gone(stack, [rsrc.resource_id])

    def test_check_fails_when_the_lease_is_not_as_expected(self):
        stack = self._create(_template(mem={'memory': 1024,
                                            'host': 'compute-1'}))
        self.assertEqual((stack.CREATE, stack.COMPLETE), stack.state,
                         stack.status_reason)
        lease_id = stack['mem'].resource_id
        # Unbound behind Heat's back.
        client = stack['mem'].client()
        client.leases.unbind(lease_id)
        stack.check()
        self.assertEqual((stack.CHECK, stack.FAILED), stack.state)
        self.assertIn("'status': expected '['bound']'", stack.status_reason)
        self._assert_gone(stack, [lease_id])

    def test_update_extends_end_in_place_and_replaces_memory(self):
        template = _template(mem={'memory': 1024, 'end': _in(1)})
        stack = self._create(template)
        self.assertEqual((stack.CREATE, stack.COMPLETE), stack.state,
                         stack.status_reason)
        first_id = stack['mem'].resource_id

        later = _in(3)
        updated = self._updated(_template(mem={'memory': 1024,
                                               'end': later}))
        stack.update(updated)
        self.assertEqual((stack.UPDATE, stack.COMPLETE), stack.state,
                         stack.status_reason)
        self.assertEqual(first_id, stack['mem'].resource_id)
        found = self._lease(first_id)
        self.assertEqual(later.replace('Z', ''), found['end_at'][:19])
        self.assertEqual('reserved', found['status'])

        # More memory is a new lease; the old one is released.
        bigger = self._updated(_template(mem={'memory': 2048, 'end': later}))
        stack.update(bigger)
        self.assertEqual((stack.UPDATE, stack.COMPLETE), stack.state,
                         stack.status_reason)
        second_id = stack['mem'].resource_id
        self.assertNotEqual(first_id, second_id)
        self.assertEqual(2048, self._lease(second_id)['memory_mb'])
        self.assertEqual('released', self._lease(first_id)['status'])
        self.assertEqual([second_id], [x['uuid'] for x in self._leases()])
        self._assert_gone(stack, [first_id, second_id])

    def test_update_moves_the_binding_to_another_host(self):
        stack = self._create(_template(mem={'memory': 1024,
                                            'host': 'compute-0'}))
        self.assertEqual((stack.CREATE, stack.COMPLETE), stack.state,
                         stack.status_reason)
        lease_id = stack['mem'].resource_id
        self.assertEqual('compute-0', self._lease(lease_id)['host'])
        stack.update(self._updated(_template(mem={'memory': 1024,
                                                  'host': 'compute-1'})))
        self.assertEqual((stack.UPDATE, stack.COMPLETE), stack.state,
                         stack.status_reason)
        self.assertEqual(lease_id, stack['mem'].resource_id)
        found = self._lease(lease_id)
        self.assertEqual(('bound', 'compute-1'),
                         (found['status'], found['host']))
        # Without a host the lease is unbound and stays reserved.
        stack.update(self._updated(_template(mem={'memory': 1024})))
        self.assertEqual((stack.UPDATE, stack.COMPLETE), stack.state,
                         stack.status_reason)
        found = self._lease(lease_id)
        self.assertEqual(('reserved', None),
                         (found['status'], found['host']))
        self._assert_gone(stack, [lease_id])

    def test_more_memory_than_the_pool_holds_fails_with_its_reason(self):
        total = self._pool('memory-pool')['total']
        stack = self._create(_template(mem={'memory': total * 4}))
        self.assertEqual((stack.CREATE, stack.FAILED), stack.state)
        self.assertIn("Invalid input for field 'memory_mb': %d MiB is more "
                      "than the largest memory pool (memory-pool) holds in "
                      "total (%d MiB)" % (total * 4, total),
                      stack.status_reason)
        self.assertIsNone(stack['mem'].resource_id)
        self.assertEqual([], self._leases())

    def test_more_memory_than_is_free_fails_with_the_lease_fault(self):
        # One try: the default retries would make (and delete) the same
        # failing lease again.
        cfg.CONF.set_override('action_retry_limit', 0)
        pool = self._pool('memory-pool')
        holder = self._create(_template(mem={'memory': 1024}))
        self.assertEqual((holder.CREATE, holder.COMPLETE), holder.state,
                         holder.status_reason)
        stack = self._create(_template(mem={'memory': pool['total']}))
        self.assertEqual((stack.CREATE, stack.FAILED), stack.state)
        lease_id = stack['mem'].resource_id
        found = self._lease(lease_id)
        self.assertEqual('alloc_failed', found['status'])
        self.assertTrue(found['fault'])
        self.assertIn('Went to status alloc_failed', stack.status_reason)
        self.assertIn(found['fault'], stack.status_reason)
        self._assert_gone(stack, [lease_id])
        self._assert_gone(holder, [holder['mem'].resource_id])

    def test_bad_request_fails_create_with_the_api_message(self):
        stack = self._create(_template(mem={'memory': 1024,
                                            'pools': ['gpu-pool']}))
        self.assertEqual((stack.CREATE, stack.FAILED), stack.state)
        self.assertIn('gpu-pool is a gpu pool and the lease asks for no '
                      'devices', stack.status_reason)
        self.assertEqual([], self._leases())

    def test_server_binding_needs_nova_and_says_so(self):
        # The standalone service has no [nova]: it cannot find where a
        # server runs, and Heat reports its answer.
        cfg.CONF.set_override('action_retry_limit', 0)
        stack = self._create(_template(mem={'memory': 1024,
                                            'server': str(uuid.uuid4())}))
        self.assertEqual((stack.CREATE, stack.FAILED), stack.state)
        self.assertIn('with [nova] configured', stack.status_reason)
        lease_id = stack['mem'].resource_id
        self.assertEqual('reserved', self._lease(lease_id)['status'])
        self._assert_gone(stack, [lease_id])

    def test_elastic_lease_created_updated_in_place_then_replaced(self):
        elastic = {'min_mb': 1024, 'max_mb': 4096, 'headroom': 0.5}
        stack = self._create(_template(mem={'memory': 2048,
                                            'elastic': elastic}))
        self.assertEqual((stack.CREATE, stack.COMPLETE), stack.state,
                         stack.status_reason)
        rsrc = stack['mem']
        first_id = rsrc.resource_id
        found = self._lease(first_id)
        self.assertEqual('reserved', found['status'])
        self.assertEqual({'min_mb': 1024, 'max_mb': 4096,
                          'observation_window': 300,
                          'prediction_window': 60, 'headroom': 0.5},
                         rsrc.FnGetAtt('elastic'))
        self.assertEqual(2048, rsrc.FnGetAtt('memory_mb'))

        # A new end is changed in place, the policy stays.
        later = _in(2)
        stack.update(self._updated(_template(mem={
            'memory': 2048, 'elastic': elastic, 'end': later})))
        self.assertEqual((stack.UPDATE, stack.COMPLETE), stack.state,
                         stack.status_reason)
        self.assertEqual(first_id, stack['mem'].resource_id)
        found = self._lease(first_id)
        self.assertEqual(later.replace('Z', ''), found['end_at'][:19])
        self.assertEqual(4096, stack['mem'].FnGetAtt('elastic')['max_mb'])

        # New limits: a new lease, the old one released.
        wider = dict(elastic, max_mb=8192, observation_window=600)
        stack.update(self._updated(_template(mem={
            'memory': 2048, 'elastic': wider, 'end': later})))
        self.assertEqual((stack.UPDATE, stack.COMPLETE), stack.state,
                         stack.status_reason)
        second_id = stack['mem'].resource_id
        self.assertNotEqual(first_id, second_id)
        policy = stack['mem'].FnGetAtt('elastic')
        self.assertEqual((8192, 600), (policy['max_mb'],
                                       policy['observation_window']))
        self.assertEqual('released', self._lease(first_id)['status'])
        self._assert_gone(stack, [first_id, second_id])

    def test_bad_elastic_limits_fail_with_the_api_message(self):
        stack = self._create(_template(mem={
            'memory': 2048, 'elastic': {'min_mb': 4096, 'max_mb': 1024}}))
        self.assertEqual((stack.CREATE, stack.FAILED), stack.state)
        self.assertIn("Invalid input for field 'elastic/min_mb': 4096 is "
                      "more than max_mb 1024", stack.status_reason)
        self.assertIsNone(stack['mem'].resource_id)
        self.assertEqual([], self._leases())

    def _sriov_pool(self):
        """A pool of four SR-IOV virtual functions of a physical function
        of compute-1, made as an admin (the inventory is not Heat's)."""
        suffix = uuid.uuid4().hex
        name = 'vfs-%s' % suffix[:8]
        # One pool per physical function: each test its own.
        resp = COMPOSABLE.post('pools', 'admin-project', {
            'name': name, 'kind': 'pci', 'fabric': 'demo-fabric',
            'device_class': 'NIC', 'sriov': {
                'host': 'compute-1',
                'pf_address': '0000:%s:%s.0' % (suffix[:2], suffix[2:4]),
                'vf_count': 4}}, roles='admin,member,reader', version='1.3')
        self.assertEqual(201, resp.status_code, resp.text)
        return name

    def test_lease_of_an_sriov_pool_takes_a_virtual_function(self):
        pool = self._sriov_pool()
        # No device_kind: composable takes the pool's (nic), not gpu.
        stack = self._create(_template(vf={'device_count': 1,
                                           'pools': [pool]}))
        self.assertEqual((stack.CREATE, stack.COMPLETE), stack.state,
                         stack.status_reason)
        rsrc = stack['vf']
        found = self._lease(rsrc.resource_id)
        self.assertEqual(('reserved', 'nic', 1),
                         (found['status'], found['device_kind'],
                          len(found['devices'])))
        self.assertEqual(['nic'], [d['kind'] for d in
                                   rsrc.FnGetAtt('devices')])
        self.assertEqual(3, self._pool(pool)['free'])
        self._assert_gone(stack, [rsrc.resource_id])
        self.assertEqual(4, self._pool(pool)['free'])

    def test_sriov_lease_bound_to_another_host_fails_with_the_reason(self):
        cfg.CONF.set_override('action_retry_limit', 0)
        pool = self._sriov_pool()
        stack = self._create(_template(vf={'device_count': 1,
                                           'pools': [pool],
                                           'host': 'compute-0'}))
        self.assertEqual((stack.CREATE, stack.FAILED), stack.state)
        self.assertIn('it can be bound to that host only',
                      stack.status_reason)
        self.assertIn('compute-1', stack.status_reason)
        lease_id = stack['vf'].resource_id
        self.assertEqual('reserved', self._lease(lease_id)['status'])
        self._assert_gone(stack, [lease_id])

    def test_lease_starting_later_completes_as_requested(self):
        start, end = _in(1), _in(2)
        stack = self._create(_template(mem={'memory': 1024, 'start': start,
                                            'end': end}))
        self.assertEqual((stack.CREATE, stack.COMPLETE), stack.state,
                         stack.status_reason)
        found = self._lease(stack['mem'].resource_id)
        self.assertEqual('requested', found['status'])
        self.assertEqual([], found['extents'])
        self.assertEqual(start.replace('Z', ''), found['start_at'][:19])
        self._assert_gone(stack, [found['uuid']])

    def test_delete_of_a_lease_deleted_outside_heat_completes(self):
        stack = self._create(_template(mem={'memory': 1024}))
        self.assertEqual((stack.CREATE, stack.COMPLETE), stack.state,
                         stack.status_reason)
        lease_id = stack['mem'].resource_id
        stack['mem'].client().leases.delete(lease_id)
        self._assert_gone(stack, [lease_id])

    def test_sample_template_creates_updates_and_deletes(self):
        end = _in(1)
        stack = utils.parse_stack(_sample(), params={'end': end})
        self._authenticate(stack)
        stack.timeout_mins = DEADLINE_MINUTES
        self.addCleanup(self._delete_quietly, stack)
        stack.create()
        self.assertEqual((stack.CREATE, stack.COMPLETE), stack.state,
                         stack.status_reason)
        memory_id = stack['memory_lease'].resource_id
        gpu_id = stack['gpu_lease'].resource_id
        memory = self._lease(memory_id)
        gpu = self._lease(gpu_id)
        self.assertEqual(('reserved', 2048),
                         (memory['status'], memory['memory_mb']))
        self.assertEqual(('bound', 'compute-0', 1),
                         (gpu['status'], gpu['host'], len(gpu['devices'])))
        # As heat-engine does before showing outputs (and Heat's tests).
        stack._update_all_resource_data(False, True)
        gpu_output = stack.outputs['gpu_lease'].get_value()
        self.assertEqual((gpu_id, 'bound', 'compute-0'),
                         (gpu_output['id'], gpu_output['status'],
                          gpu_output['host']))
        self.assertEqual(['FakeGPU-16G'],
                         [d['model'] for d in gpu_output['devices']])
        memory_output = stack.outputs['memory_lease'].get_value()
        self.assertEqual(2048, sum(e['size_mb']
                                   for e in memory_output['extents']))

        later = _in(2)
        stack.update(self._updated(_sample(), params={'end': later}))
        self.assertEqual((stack.UPDATE, stack.COMPLETE), stack.state,
                         stack.status_reason)
        self.assertEqual((memory_id, gpu_id),
                         (stack['memory_lease'].resource_id,
                          stack['gpu_lease'].resource_id))
        for lease_id in (memory_id, gpu_id):
            self.assertEqual(later.replace('Z', ''),
                             self._lease(lease_id)['end_at'][:19])
        self.assertEqual('bound', self._lease(gpu_id)['status'])
        self._assert_gone(stack, [memory_id, gpu_id])
        self.assertEqual([], self._leases())

    def test_service_killed_mid_create_then_restarted(self):
        # A composable of this test's own, killed between the lease's
        # creation and its bind: the resource fails with a clear reason
        # instead of waiting, and once composable is back the stack's
        # delete releases the lease it left.
        own = standalone.Composable()
        self.addCleanup(own.stop)
        own.start()
        cfg.CONF.set_override('action_retry_limit', 0)
        bind = lease.Lease._bind

        def crash_then_bind(rsrc, lease_id, target):
            own.kill()
            return bind(rsrc, lease_id, target)

        self.patchobject(lease.Lease, '_bind', new=crash_then_bind)
        stack = self._stack(_template(gpu={'gpu_count': 1,
                                           'host': 'compute-0'}),
                            endpoint=own.endpoint)
        stack.timeout_mins = DEADLINE_MINUTES
        stack.create()
        self.assertEqual((stack.CREATE, stack.FAILED), stack.state)
        self.assertIn('Unable to reach the composable API at %s'
                      % own.endpoint, stack.status_reason)
        lease_id = stack['gpu'].resource_id
        self.assertIsNotNone(lease_id)

        own.start()
        found = own.get('leases/%s' % lease_id, self.project_id).json()
        self.assertEqual('reserved', found['status'])
        stack.delete()
        self.assertEqual((stack.DELETE, stack.COMPLETE), stack.state,
                         stack.status_reason)
        found = own.get('leases/%s' % lease_id, self.project_id)
        if found.status_code != 404:
            self.assertEqual('released', found.json()['status'])
        self.assertEqual(4, own.get('pools/gpu-pool',
                                    self.project_id).json()['free'])

    def test_unreachable_service_fails_create_clearly(self):
        stack = self._stack(_template(mem={'memory': 1024}),
                            endpoint='http://127.0.0.1:%d'
                            % standalone._free_port())
        stack.timeout_mins = DEADLINE_MINUTES
        stack.create()
        self.assertEqual((stack.CREATE, stack.FAILED), stack.state)
        self.assertIn('Unable to reach the composable API',
                      stack.status_reason)
