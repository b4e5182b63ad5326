# Nova is loaded under its own CONF before any test module imports it.
from tests.unit.nova import novaenv

novaenv.load()
