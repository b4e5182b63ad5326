import pytest

from tests.unit.nova import novaenv

# Nova is loaded under its own CONF before any test module imports it.
NOVA_CONF = novaenv.load()


@pytest.fixture(autouse=True)
def nova_conf():
    with novaenv.NovaConf(NOVA_CONF, parse=True) as conf:
        yield conf
