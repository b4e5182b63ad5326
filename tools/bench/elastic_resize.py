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

"""Elastic resizing benchmark: what the conductor's periodic pass over
elastic memory leases costs, per lease.

Runs a conductor with in-process agents (the fake messaging transport,
the agents' simulated data plane) on a SQLite database in a temporary
directory, with ``--leases`` bound elastic leases, each with a full
observation window of usage samples that needs no resize (the pass reads,
predicts and leaves them). Times:

* ``predict_ms``: the prediction alone (put the samples on the grid, fit
  the autoregressive model, iterate it over the prediction window);
* ``per_lease_ms``: a whole pass (ElasticResizer.run) divided by the
  number of leases: listing them, reading their samples in bulk,
  predicting (a lease that needs no resize has no reservation taken).

The last line is the summary:

  elastic_resize: leases=... samples=... per_lease_ms=... predict_ms=...

Usage: tools/bench/elastic_resize.py [--leases 50] [--passes 5]
"""

import argparse
import datetime
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                '..', '..')))

from composable.common import states  # noqa: E402
from composable.common import utils  # noqa: E402
from composable import conf  # noqa: E402
from composable.conductor.elastic import predictor as ar  # noqa: E402
from composable.conductor.elastic import resizer  # noqa: E402
from composable.db import api as db_api  # noqa: E402
from tests.unit.conductor import harness as harness_mod  # noqa: E402

CONF = conf.CONF
POLICY = {'min_mb': 1024, 'max_mb': 8192, 'observation_window': 300,
          'prediction_window': 60, 'headroom': 0.2}


class BigHarness(harness_mod.Harness):

    def inventory(self, node_mb=1 << 20, gpus=0):
        super().inventory(node_mb=node_mb, gpus=gpus)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--leases', type=int, default=50)
    parser.add_argument('--passes', type=int, default=5)
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix='composable-bench-elastic-')
    harness = None
    try:
        CONF([], project='composable', default_config_files=[],
             default_config_dirs=[])
        CONF.set_override('connection', 'sqlite:///%s' % os.path.join(
            tmp, 'bench.sqlite'), 'database')
        db_api.reset_facade()
        db_api.create_schema_for_tests()
        # Samples every 10 s over the 300 s observation window.
        CONF.set_override('sample_interval', 10, 'elastic')
        harness = BigHarness(rpc_timeout=30, fabric_timeout=30).start()
        admin = harness_mod.admin()
        host = harness_mod.HOSTS[0]
        interval = CONF.elastic.sample_interval
        steps = POLICY['observation_window'] // interval
        now = utils.utcnow()
        leases = []
        for i in range(args.leases):
            uuid = harness.create(memory_mb=1024, elastic=dict(POLICY))
            harness.api.bind_lease(harness_mod.user_context(), uuid,
                                   harness.hosts[host].uuid)
            leases.append(harness.wait(uuid, states.BOUND, timeout=120))
        for lease in leases:
            db_api.usage_record(admin, host, [
                {'lease_uuid': lease.uuid, 'used_mb': 200 + (i % 3) * 50,
                 'size_mb': 1024,
                 'taken_at': now - datetime.timedelta(
                     seconds=(steps - 1 - i) * interval)}
                for i in range(steps)])

        rows = db_api.usage_list(admin, leases[0].id)
        predictor = ar.Predictor(
            order=CONF.elastic.model_order, observation=steps,
            horizon=POLICY['prediction_window'] // interval,
            headroom=POLICY['headroom'], quantum=1024,
            floor=POLICY['min_mb'], ceiling=POLICY['max_mb'])
        predict = []
        for _ in range(200):
            started = time.perf_counter()
            predictor.predict(resizer.usage_grid(rows, now, interval,
                                                 steps))
            predict.append(time.perf_counter() - started)

        per_lease = []
        for _ in range(args.passes):
            started = time.perf_counter()
            started_resizes = harness.conductor.resizer.run(admin, now=now)
            elapsed = time.perf_counter() - started
            assert not started_resizes, 'the benchmark leases need no resize'
            per_lease.append(elapsed / len(leases))
            print('pass: %d leases in %.1f ms' % (len(leases),
                                                  elapsed * 1000))
        print('elastic_resize: leases=%d samples=%d per_lease_ms=%.2f '
              'predict_ms=%.3f' % (
                  len(leases), steps,
                  statistics.median(per_lease) * 1000,
                  statistics.median(predict) * 1000))
    finally:
        if harness is not None:
            harness.stop()
        db_api.reset_facade()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    main()
