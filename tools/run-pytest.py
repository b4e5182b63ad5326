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

"""Run pytest with the given arguments.

pytest exits 5 when it collects no test at all (for example a test tier
whose folder has no tests yet). That is reported, not failed; any other
exit status is passed through unchanged.
"""

import sys

import pytest

NO_TESTS_COLLECTED = 5


def main(argv):
    rc = int(pytest.main(argv))
    if rc == NO_TESTS_COLLECTED:
        print('run-pytest: no tests were collected in %s' % ' '.join(argv))
        return 0
    return rc


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
