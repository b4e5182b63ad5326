"""keystoneauth helpers shared by composable's clients of other services
(Placement, Nova) and by the Nova-side scheduler filter: no composable
configuration is imported here."""


def adapter_options(group):
    """keystoneauth Adapter arguments from a configuration ``group`` that
    has the adapter options (without the version options and without the
    interface, which each caller passes as its client wants it)."""
    return dict(service_type=group.service_type,
                service_name=group.service_name,
                region_name=group.region_name,
                endpoint_override=group.endpoint_override,
                connect_retries=group.connect_retries,
                connect_retry_delay=group.connect_retry_delay,
                status_code_retries=group.status_code_retries,
                status_code_retry_delay=group.status_code_retry_delay)
