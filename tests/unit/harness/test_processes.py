"""The harness's processes: settings as environment variables, free ports, and what psutil
reads of a process tree."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator

import pytest

from harness.processes import (
    alive,
    descendants,
    environment,
    free_ports,
    peak_rss_bytes,
    rss_mib,
)


def test_nested_settings_become_photosearch_variables() -> None:
    values = {"data_dir": "/d", "indexer": {"batch_size": 64, "retry": {"max": 3}}}
    assert environment(values) == {
        "PHOTOSEARCH_DATA_DIR": "/d",
        "PHOTOSEARCH_INDEXER__BATCH_SIZE": "64",
        "PHOTOSEARCH_INDEXER__RETRY__MAX": "3",
    }


def test_free_ports_are_distinct() -> None:
    ports = free_ports(8)
    assert len(set(ports)) == 8 and all(port > 0 for port in ports)


@pytest.fixture
def shell_with_a_child() -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A shell that started a sleep and printed its pid: both exist once the line is read."""
    with subprocess.Popen(
        ["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE, text=True
    ) as shell:
        assert shell.stdout is not None
        child = int(shell.stdout.readline())
        try:
            yield shell, child
        finally:
            for pid in (child, shell.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def test_a_tree_is_found_below_its_root_and_its_memory_read(
    shell_with_a_child: tuple[subprocess.Popen[str], int],
) -> None:
    shell, child = shell_with_a_child
    assert descendants(shell.pid) == {child}
    assert alive(shell.pid) and alive(child)
    assert rss_mib({shell.pid, child}) > 0
    assert peak_rss_bytes(child) > 0


def test_a_zombie_is_not_alive_and_a_reaped_process_holds_nothing(
    shell_with_a_child: tuple[subprocess.Popen[str], int],
) -> None:
    shell, _ = shell_with_a_child
    shell.kill()
    os.waitid(os.P_PID, shell.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
    assert not alive(shell.pid)
    shell.wait()
    assert not alive(shell.pid)
    assert descendants(shell.pid) == set() and rss_mib({shell.pid}) == 0
    assert peak_rss_bytes(shell.pid) == 0
