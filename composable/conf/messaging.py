import oslo_messaging as messaging


def register_opts(conf):
    messaging.set_transport_defaults(control_exchange='composable')


def list_opts():
    return {}
