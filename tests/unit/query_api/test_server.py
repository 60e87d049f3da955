"""The API's uvicorn configuration: the settings' deadline on request headers, the bound on
connections, and the client's address left for the app to find."""

from __future__ import annotations

from core.settings import Settings
from core.settings_api import ApiSettings
from query_api.server import server_config


def test_the_server_keeps_the_settings_deadlines_and_bounds() -> None:
    api = ApiSettings(header_timeout_s=3.5, max_connections=17, host="0.0.0.0", port=8123)
    config = server_config(object(), Settings(api=api))
    assert config.http.header_timeout_s == 3.5  # type: ignore[union-attr]
    assert config.limit_concurrency == 17
    assert config.proxy_headers is False
    assert (config.host, config.port) == ("0.0.0.0", 8123)


def test_options_given_override_the_settings_address() -> None:
    config = server_config(object(), Settings(), host="127.0.0.1", port=9001, log_level="warning")
    assert (config.host, config.port, config.log_level) == ("127.0.0.1", 9001, "warning")
