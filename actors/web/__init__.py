"""The HTTP surfaces for people and operators beside the webhook: ``/metrics`` (Prometheus
text format, :mod:`actors.web.metrics`) and the JSON API under ``/api/v1/``
(:mod:`actors.web.api`, its OpenAPI document :mod:`actors.web.openapi`, tokens and chat scopes
:mod:`actors.web.auth`). Quart blueprints, served by the process's quart-trio app."""
