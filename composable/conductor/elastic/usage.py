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

"""Usage telemetry of memory leases, conductor side.

Compute agents report, per bound memory lease, how much of it holds pages
(ConductorAPI.report_lease_usage, a cast). Samples are validated here and
stored for ``[elastic]usage_retention`` seconds; samples of leases that
are not bound on the reporting host are dropped, so an agent can only
write the history of leases it serves. The pruning task deletes what is
older, in batches.
"""

import datetime

from oslo_log import log as logging
from oslo_utils import timeutils
from oslo_utils import uuidutils

from composable.common import utils
from composable import conf
from composable.db import api as db_api

CONF = conf.CONF
LOG = logging.getLogger(__name__)

#: Most samples one report may carry; a larger report is cut here (the
#: newest are kept) rather than held in one huge transaction.
MAX_SAMPLES_PER_REPORT = 10000

#: A sample taken further in the future than this (clock skew between a
#: compute node and the database) is refused: it would sort after every
#: real sample for as long as it is kept.
MAX_CLOCK_SKEW = datetime.timedelta(minutes=5)


class BadSample(ValueError):
    pass


def _whole(name, value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadSample('%s is not a whole number of MiB: %r' % (name, value))
    if value < 0:
        raise BadSample('%s is negative: %d' % (name, value))
    return value


def parse_sample(sample, now=None):
    """The sample as stored (taken_at a naive UTC datetime); BadSample
    when it is not {'lease_uuid': str, 'taken_at': ISO 8601 UTC str,
    'used_mb': int, 'size_mb': int}."""
    if not isinstance(sample, dict):
        raise BadSample('a sample is a mapping, not %s' %
                        type(sample).__name__)
    missing = {'lease_uuid', 'taken_at', 'used_mb', 'size_mb'} - set(sample)
    if missing:
        raise BadSample('missing %s' % ', '.join(sorted(missing)))
    lease_uuid = sample['lease_uuid']
    if not isinstance(lease_uuid, str) or not uuidutils.is_uuid_like(
            lease_uuid):
        raise BadSample('lease_uuid is not a UUID: %r' % (lease_uuid,))
    taken_at = sample['taken_at']
    if not isinstance(taken_at, str):
        raise BadSample('taken_at is not an ISO 8601 string: %r' %
                        (taken_at,))
    try:
        taken = utils.to_naive_utc(timeutils.parse_isotime(taken_at))
    except ValueError:
        raise BadSample('taken_at is not an ISO 8601 time: %r' % taken_at)
    now = now or utils.utcnow()
    if taken - now > MAX_CLOCK_SKEW:
        raise BadSample('taken_at %s is in the future' % taken_at)
    used = _whole('used_mb', sample['used_mb'])
    size = _whole('size_mb', sample['size_mb'])
    if used > size:
        raise BadSample('used_mb %d is more than size_mb %d' % (used, size))
    return {'lease_uuid': lease_uuid.lower(),
            'taken_at': taken.replace(microsecond=0),
            'used_mb': used, 'size_mb': size}


def record(context, host, samples):
    """Validate and store ``samples`` from the agent of ``host``; the
    number stored. Malformed samples, and samples of leases unknown or
    not bound on ``host``, are dropped with a debug log: a report is a
    cast, nobody waits for an error."""
    if not isinstance(samples, (list, tuple)):
        LOG.debug('Usage report of host %(host)s is not a list (%(type)s); '
                  'dropped', {'host': host, 'type': type(samples).__name__})
        return 0
    if len(samples) > MAX_SAMPLES_PER_REPORT:
        LOG.debug('Usage report of host %(host)s holds %(n)d samples; '
                  'keeping the newest %(max)d',
                  {'host': host, 'n': len(samples),
                   'max': MAX_SAMPLES_PER_REPORT})
        samples = samples[-MAX_SAMPLES_PER_REPORT:]
    now = utils.utcnow()
    good = []
    for sample in samples:
        try:
            good.append(parse_sample(sample, now))
        except BadSample as exc:
            LOG.debug('Dropped a usage sample from host %(host)s: %(why)s',
                      {'host': host, 'why': exc})
    if not good:
        return 0
    stored, dropped = db_api.usage_record(context, host, good)
    if dropped:
        LOG.debug('Dropped the usage samples of lease(s) %(leases)s from '
                  'host %(host)s: unknown, or not bound on that host',
                  {'leases': ', '.join(dropped), 'host': host})
    return stored


def prune(context, now=None):
    """Delete samples older than ``[elastic]usage_retention``; how many."""
    now = now or utils.utcnow()
    cutoff = now - datetime.timedelta(seconds=CONF.elastic.usage_retention)
    deleted = db_api.usage_prune(context, cutoff,
                                 batch_size=CONF.elastic.prune_batch_size)
    if deleted:
        LOG.info('Pruned %(n)d usage sample(s) taken before %(cutoff)s',
                 {'n': deleted, 'cutoff': utils.isotime(cutoff)})
    return deleted
