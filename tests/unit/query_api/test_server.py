"""The API's uvicorn configuration: the settings' deadline on request headers, the bound on
connections, the client's address left for the app to find, and its log moved aside by size."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from core.settings import Settings
from core.settings_api import ApiSettings
from query_api.server import log_config, server_config


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


# Run in a child process: uvicorn's Config sets up logging for the whole process, and the
# child's stdout and stderr are the log file itself, as `photosearch up` starts the API.
_FLOOD = """
import logging, sys
from core.settings import Settings
from core.settings_api import ApiSettings
from query_api.server import server_config

api = ApiSettings(log_file=sys.argv[1], log_max_bytes=4096, log_backups=2)
server_config(object(), Settings(api=api))
for n in range(200):
    try:
        raise RuntimeError(f"failure {n}")
    except RuntimeError:
        logging.getLogger("query_api.http.errors").exception("unhandled error %d", n)
    logging.getLogger("uvicorn.access").info('%s - "%s %s HTTP/%s" %d', "c", "GET", "/", "1.1", 500)
print("the last words on stdout", flush=True)
"""


def test_a_flood_of_errors_moves_the_log_aside_and_keeps_a_bounded_few(tmp_path: Path) -> None:
    """Issue 33, F5: a traceback per bad request once grew api.log until a restart."""
    log = tmp_path / "logs" / "api.log"
    log.parent.mkdir()
    with log.open("ab") as out:
        subprocess.run(
            [sys.executable, "-c", _FLOOD, str(log)],
            stdout=out,
            stderr=subprocess.STDOUT,
            check=True,
            timeout=120,
        )
    files = sorted(p.name for p in log.parent.iterdir())
    assert files == ["api.log", "api.log.1", "api.log.2"], files
    record = 1024  # a traceback record here is well under a kilobyte
    assert all((log.parent / name).stat().st_size <= 4096 + record for name in files)
    text = log.read_text()
    # The newest records are in api.log, with the request lines; what went to stdout after
    # the files moved followed them.
    assert "unhandled error 199" in text and "RuntimeError: failure 199" in text
    assert '"GET / HTTP/1.1" 500' in text
    assert text.endswith("the last words on stdout\n")


def test_without_a_log_file_uvicorn_logs_to_stderr_as_before() -> None:
    assert log_config(ApiSettings()) is None
