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

# The memory tests' fixtures, for the privileged tgt calls
# (test_tgt.py): a tmpfs area on a temporary directory, the memory
# node's options, privileged functions in this process.
from tests.unit.memory.conftest import area  # noqa: F401
from tests.unit.memory.conftest import memory_conf  # noqa: F401
from tests.unit.memory.conftest import privsep_in_process  # noqa: F401
