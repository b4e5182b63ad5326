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

"""The console script and the WSGI module."""

import gc
import threading

import pytest
import webob

from composable.cmd import api as cmd_api
from composable.common import service
from composable.wsgi import api as wsgi_api


class FakeServer(object):
    def __init__(self):
        self.served = False
        self.closed = False

    def serve_forever(self):
        self.served = True
        raise KeyboardInterrupt()

    def server_close(self):
        self.closed = True


@pytest.fixture
def freezes(monkeypatch):
    """The calls of gc.freeze, which is not really called: frozen test
    objects would never be collected in the test worker."""
    calls = []
    monkeypatch.setattr(service.gc, 'freeze', lambda: calls.append(True))
    return calls


def test_freeze_startup_objects_freezes_after_a_full_collection(
        monkeypatch):
    order = []
    monkeypatch.setattr(service.gc, 'collect',
                        lambda: order.append('collect'))
    monkeypatch.setattr(service.gc, 'freeze',
                        lambda: order.append('freeze'))
    monkeypatch.setattr(service.gc, 'get_freeze_count', lambda: 150000)
    assert service.freeze_startup_objects() == 150000
    assert order == ['collect', 'freeze']


def test_a_real_freeze_takes_the_objects_out_of_full_collections():
    """What the helper relies on: after gc.freeze, a full collection no
    longer walks what existed before it (get_objects of every generation
    shrinks by the frozen count), and unfreeze gives them back."""
    before = len(gc.get_objects())
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen >= before // 2
        assert len(gc.get_objects()) < before - frozen // 2
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0


def test_console_script(api_env, monkeypatch, freezes):
    made = {}
    server = FakeServer()

    def make_server(app, host, port, threads):
        made.update(app=app, host=host, port=port, threads=threads)
        return server

    messages = []
    monkeypatch.setattr(cmd_api.wsgi_server, 'make_server', make_server)
    monkeypatch.setattr(cmd_api.logging, 'setup', lambda *a, **k: None)
    monkeypatch.setattr(cmd_api.LOG, 'info',
                        lambda msg, *args: messages.append(msg % args))
    api_env.set_override('auth_strategy', 'noauth')
    try:
        assert cmd_api.main([]) == 0
    finally:
        api_env.clear_override('auth_strategy')
    assert made['host'] == '127.0.0.1'
    assert made['port'] == 6590
    assert made['threads'] == api_env.api.workers
    assert server.served and server.closed
    assert 'composable-api listening on http://127.0.0.1:6590' in messages
    # Once, when the server is made and before it serves.
    assert freezes == [True]
    resp = webob.Request.blank('/v1/pools').get_response(made['app'])
    assert resp.status_int == 200


def test_wsgi_application_is_lazy(api_env, monkeypatch, freezes):
    calls = []
    real_init = wsgi_api.init_application

    def init_application():
        calls.append(True)
        return real_init()

    monkeypatch.setattr(wsgi_api.logging, 'setup', lambda *a, **k: None)
    monkeypatch.setattr(wsgi_api, 'init_application', init_application)
    monkeypatch.setattr(wsgi_api, '_APPLICATION', None)
    assert calls == []
    for _ in range(2):
        resp = webob.Request.blank('/').get_response(wsgi_api.application)
        assert resp.status_int == 200
        assert resp.json['versions'][0]['id'] == 'v1'
    assert calls == [True]
    # Frozen once, when the application was made, not per request.
    assert freezes == [True]


def test_wsgi_config_from_environment():
    assert wsgi_api.config_args({}) == []
    assert wsgi_api.config_args({
        wsgi_api.CONFIG_FILES_ENV: '/etc/a.conf; /etc/b.conf;',
        wsgi_api.CONFIG_DIR_ENV: '/etc/composable/conf.d',
    }) == ['--config-file', '/etc/a.conf', '--config-file', '/etc/b.conf',
           '--config-dir', '/etc/composable/conf.d']


def test_wsgi_reads_the_files_named_in_the_environment(api_env, monkeypatch,
                                                       tmp_path):
    conf_file = tmp_path / 'composable.conf'
    conf_file.write_text('[api]\nmax_limit = 77\n')
    monkeypatch.setenv(wsgi_api.CONFIG_FILES_ENV, str(conf_file))
    monkeypatch.setattr(wsgi_api.logging, 'setup', lambda *a, **k: None)
    try:
        wsgi_api.init_application()
        assert api_env.api.max_limit == 77
    finally:
        # The next tests see the configuration without that file.
        api_env([], project='composable', default_config_files=[])
    assert api_env.api.max_limit != 77


class _Service(object):
    def __init__(self, log, name):
        self.log, self.name = log, name

    def start(self):
        self.log.append('start ' + self.name)

    def stop(self):
        self.log.append('stop ' + self.name)

    def wait(self):
        pass


def test_services_freeze_once_every_service_has_started(monkeypatch):
    log = []
    stop = threading.Event()
    monkeypatch.setattr(service.gc, 'freeze', lambda: log.append('freeze'))
    monkeypatch.setattr(service, '_wait', lambda event: log.append('wait'))
    service.run([_Service(log, 'rpc'), _Service(log, 'periodic')], stop)
    assert log == ['start rpc', 'start periodic', 'freeze', 'wait',
                   'stop periodic', 'stop rpc']


def test_services_stopped_while_starting_freeze_nothing(monkeypatch):
    log = []
    stop = threading.Event()

    class Stopping(_Service):
        def start(self):
            super().start()
            stop.set()

    monkeypatch.setattr(service.gc, 'freeze', lambda: log.append('freeze'))
    monkeypatch.setattr(service, '_wait', lambda event: log.append('wait'))
    service.run([Stopping(log, 'rpc'), _Service(log, 'periodic')], stop)
    assert 'freeze' not in log
    assert log[0] == 'start rpc' and 'start periodic' not in log
