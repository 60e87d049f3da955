"""`photosearch api key` makes a key whose settings entry lets it in, and the access log
leaves out the health probes that succeed."""

from __future__ import annotations

import json
import logging

from typer.testing import CliRunner

from core.settings_api import ApiKey, ApiSettings
from query_api.cli import _QuietProbes, api_app
from query_api.http.auth import KeyRing


def test_a_new_keys_settings_entry_identifies_it_with_its_scopes() -> None:
    made = CliRunner().invoke(api_app, ["key", "ops", "--scope", "search", "--scope", "admin"])
    assert made.exit_code == 0, made.output
    key_line, entry_line = made.output.splitlines()
    key = key_line.removeprefix("key (shown once): ")
    entry = ApiKey.model_validate(json.loads(entry_line.removeprefix("config entry:")))
    caller = KeyRing(ApiSettings(keys=[entry]).keys, False).identify(key)
    assert caller is not None
    assert (caller.name, set(caller.scopes)) == ("ops", {"search", "admin"})


def test_successful_probes_leave_the_access_log_and_the_rest_stay() -> None:
    def access(path: str, status: int) -> logging.LogRecord:
        args = ("10.0.0.1:5000", "GET", path, "1.1", status)
        return logging.LogRecord("uvicorn.access", logging.INFO, "", 0, "%s", args, None)

    quiet = _QuietProbes()
    assert not quiet.filter(access("/healthz", 200))
    assert quiet.filter(access("/readyz", 503))
    assert quiet.filter(access("/v1/search", 200))
