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

"""Waiting for a condition in a test, with a deadline instead of a sleep.

The machines the tests run on are shared and busy: a guest may take
minutes to boot, a service seconds to answer. A test therefore polls for
what it expects and fails, naming what did not happen, only when a
generous deadline has passed.
"""

import time


def wait_until(predicate, timeout, what, interval=0.2, describe=None):
    """Return the first true value ``predicate()`` gives, asking every
    ``interval`` seconds; after ``timeout`` seconds fail with ``what`` (and
    ``describe()``, when given, to say where things stood)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError('%s did not happen within %s s%s' % (
                what, timeout, ': %s' % describe() if describe else ''))
        time.sleep(interval)
