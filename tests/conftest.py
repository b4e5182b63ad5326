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

"""Settings for every test run in this process.

futurist's pool threads, which run the in-process RPC servers of the
conductor and agents, look at their stop flag only when their queue has
been empty for ``MAX_IDLE_FOR`` (1 s): stopping a server then takes up to
a second per pool, which every test that stops the services pays several
times over. A shorter idle wait changes nothing else (work is taken the
moment it is queued); it only lets a stopping pool notice sooner.
"""

from futurist import _thread as futurist_thread

futurist_thread.ThreadWorker.MAX_IDLE_FOR = 0.05
