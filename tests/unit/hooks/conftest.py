# The conductor harness of tests/unit/conductor (an in-process conductor
# and agents over the fake transport, on SQLite).
from tests.unit.conductor.conftest import harness  # noqa: F401
from tests.unit.conductor.conftest import sqlite_db  # noqa: F401
from tests.unit.compute_node.conftest import fake_guest_agents  # noqa: F401
