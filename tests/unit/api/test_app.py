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

"""The WSGI application's set-up."""

import pecan.compat
import pecan.core
import pecan.routing

from composable.api import app


class _Controller(object):
    def action(self, ident, extra=None):
        return ident


def test_controller_signatures_are_remembered():
    app._remember_controller_signatures()
    # Idempotent: a second set-up does not wrap the wrapper.
    app._remember_controller_signatures()
    getargspec = pecan.core.getargspec
    assert getargspec is pecan.routing.getargspec
    assert getargspec.remembers
    first = getargspec(_Controller().action)
    # Another bound method of the same function: the same answer, once.
    assert getargspec(_Controller().action) is first
    expected = pecan.compat.getargspec(_Controller.action)
    assert tuple(first) == tuple(expected)
    assert first.args == ['self', 'ident', 'extra']
