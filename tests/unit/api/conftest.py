from tests.unit.api.base import api_env  # noqa: F401
from tests.unit.api.base import app  # noqa: F401
from tests.unit.api.base import client  # noqa: F401
from tests.unit.api.base import conductor  # noqa: F401
from tests.unit.api.base import inventory  # noqa: F401
