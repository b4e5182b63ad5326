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

group = cfg.OptGroup('elastic', title='Usage telemetry and elastic leases')

opts = [
    cfg.IntOpt('usage_retention',
               default=7 * 24 * 3600,
               min=60,
               help='Seconds a usage sample of a memory lease is kept. Older '
                    'samples are deleted by the conductor\'s pruning task. '
                    'Must be longer than the longest observation window of '
                    'an elastic lease, or its predictions see less history '
                    'than it asks for.'),
    cfg.IntOpt('prune_interval',
               default=600,
               min=0,
               help='Seconds between two runs of the task that deletes usage '
                    'samples older than usage_retention. 0 disables it.'),
    cfg.IntOpt('prune_batch_size',
               default=5000,
               min=1,
               help='Most usage samples deleted by one DELETE statement of '
                    'the pruning task, so a large backlog never holds long '
                    'locks on the table the agents write to.'),
    cfg.IntOpt('sample_interval',
               default=10,
               min=1,
               help='Seconds between two usage samples the prediction '
                    'works with. Reported samples are put on a grid of this '
                    'spacing (the newest sample of each step counts; a step '
                    'without a sample is a gap the predictor fills). Set it '
                    'to the compute agents\' reporting interval.'),
    cfg.IntOpt('resize_interval',
               default=30,
               min=0,
               help='Seconds between two runs of the task that predicts the '
                    'use of every bound elastic memory lease and grows or '
                    'shrinks it. 0 disables elastic resizing: elastic '
                    'leases then keep their size.'),
    cfg.IntOpt('shrink_hysteresis',
               default=600,
               min=0,
               help='Seconds the prediction of an elastic lease must stay '
                    'below its current size, without interruption, before '
                    'the lease shrinks. Revoking remote memory costs a '
                    'swapoff that pulls pages back into RAM; making it rare '
                    'keeps a lease from oscillating around a burst.'),
    cfg.IntOpt('model_order',
               default=4,
               min=1,
               max=64,
               help='Number of lagged samples (w) in the autoregressive '
                    'model M(t+1) = a + a0 M(t) + ... + a(w-1) M(t-w+1). '
                    'A short observation window fits a lower order.'),
    cfg.IntOpt('min_samples',
               default=3,
               min=1,
               help='An elastic lease with fewer usage samples than this in '
                    'its observation window is left at its size.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
