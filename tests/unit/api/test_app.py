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
