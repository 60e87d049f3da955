"""Where the CPU goes: process roles, cores by role between two readings, py-spy's stacks
summed by function, and py-spy sampling a real busy process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from loadtests import cpushare


def test_roles_come_from_command_lines() -> None:
    stub = ["triton_python_backend_stub", "/data/models/clip_text/1/model.py", "shm"]
    assert cpushare.role_of(stub) == "Triton stub: text"
    assert cpushare.role_of(["python", "-m", "photosearch", "serve-embedded"]) == "API"
    assert cpushare.role_of(["/usr/bin/redis-server", "127.0.0.1:6380"]) == "Redis"
    assert cpushare.role_of(["bash"]) == "other"


def test_cores_by_role_add_a_roles_processes_and_count_new_ones_from_zero() -> None:
    before = cpushare.CpuTimes({1: ("API", 10.0), 2: ("Redis", 1.0)}, wall=100.0)
    after = cpushare.CpuTimes(
        {1: ("API", 14.0), 2: ("Redis", 1.5), 3: ("Redis", 0.5), 4: ("other", 0.0)}, wall=104.0
    )
    cores = cpushare.cores_by_role(before, after)
    assert cores == {"API": 1.0, "Redis": 0.25, "other": 0.0}
    assert list(cores) == ["API", "Redis", "other"]  # busiest first


def test_the_table_gives_cores_and_cpu_milliseconds_per_search() -> None:
    lines = cpushare.table(
        {"uncached 100/s": {"API": 0.5, cpushare.GENERATOR: 0.1}}, 2, {"uncached 100/s": 100.0}
    )
    assert lines[0] == f"| phase | API | {cpushare.GENERATOR} | all | idle |"
    assert lines[2] == "| uncached 100/s | 0.50 | 0.10 | 0.60 | 1.40 |"
    # 0.6 cores at 100/s: 6 ms of CPU a search, so two cores hold at most 333/s.
    assert lines[-1] == "| uncached 100/s | 5.0 | 1.0 | 6.0 | 333 |"


RAW = [
    "<module> (query_api/app.py:3);handle (/w/query_api/search/pipeline.py:10);"
    "dumps (json/x.py:1) 5",
    "<module> (query_api/app.py:3);handle (/w/query_api/search/pipeline.py:12) 3",
    "<module> (site-packages/uvicorn/server.py:3);select (selectors.py:9) 2",
    "not a stack line",
]


def test_self_time_sums_the_innermost_frame_or_the_innermost_of_ours() -> None:
    assert cpushare.self_time(RAW) == {
        "dumps (json/x.py)": 5,
        "handle (/w/query_api/search/pipeline.py)": 3,
        "select (selectors.py)": 2,
    }
    assert cpushare.self_time(RAW, ("query_api/search/pipeline",)) == {
        "handle (/w/query_api/search/pipeline.py)": 8,
        "(elsewhere)": 2,
    }
    top = cpushare.top(cpushare.self_time(RAW), 1)
    assert top[2] == "| `dumps (json/x.py)` | 5 | 50.0% |"


def test_py_spy_samples_a_busy_process(tmp_path: Path) -> None:
    busy = textwrap.dedent(
        """
        import sys
        def spin_here():
            n = 0
            while True:
                n += 1
        print("ready", flush=True)
        spin_here()
        """
    )
    child = subprocess.Popen([sys.executable, "-c", busy], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        stacks = cpushare.Sampler(child.pid, 1, tmp_path / "raw.txt").finish()
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    functions = cpushare.self_time(stacks)
    assert functions, "py-spy wrote no samples"
    assert max(functions, key=lambda f: functions[f]).startswith("spin_here ")
