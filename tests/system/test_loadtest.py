"""The load test (`python -m loadtests.run`): its scenarios, its traffic, its figures, and one
real run against a `photosearch up` that it starts, with a sync in the middle."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from harness import photos as photoset
from harness.processes import free_ports
from harness.up import newcomer_env
from loadtests.records import FIELDS, latency, read
from loadtests.scenario import (
    DEFAULT_FILE,
    RATE_PER_USER,
    Queries,
    QueryMix,
    ScenarioError,
    expected_hit_ratio,
    load_scenario,
    load_scenarios,
    user_groups,
)
from photosearch.up.supervisor import read_state
from query_api.http.auth import hash_key
from tests.support.deployfiles import ROOT
from tests.support.upprocess import Up

ADMIN_KEY = "ps_load-test-admin-key-for-the-url-test"


# -- scenarios ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(load_scenarios()))
def test_every_scenario_in_the_file_is_valid(name: str) -> None:
    scenario = load_scenario(name)
    assert scenario.rate > 0 and scenario.duration_s > 0
    assert abs(sum(scenario.shares().values()) - 1) < 1e-9


def test_the_default_scenario_has_all_three_callers_and_a_sync() -> None:
    mixed = load_scenario("mixed")
    assert set(mixed.shares()) == {"text", "image", "similar"}
    assert mixed.sync is not None and 0 < mixed.sync.at < 1


def test_the_command_line_overrides_rate_and_duration() -> None:
    scenario = load_scenario("mixed", rate=7, duration_s=33)
    assert (scenario.rate, scenario.duration_s) == (7, 33)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("[s]\nrate = 5\nduration_s = 10\nrat = 3\n", "rat: Extra inputs are not permitted"),
        ("[s]\nrate = -1\nduration_s = 10\n", "rate: Input should be greater than 0"),
        ("[s]\nrate = 5\nduration_s = 10\nmix = { text = 0 }\n", "weights must be >= 0"),
        ("[s]\nrate = 5\nduration_s = 10\nmix = { video = 1 }\n", "mix.video"),
        ("[s]\nrate = 5\nduration_s = 10\nsync = { at = 1.5 }\n", "sync.at"),
        ("[s\nrate = 5\n", "is not valid TOML"),
    ],
)
def test_a_bad_scenario_is_refused_with_its_reason(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "scenarios.toml"
    path.write_text(body)
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(")):
        load_scenario("s", path)


def test_an_unknown_scenario_names_the_known_ones() -> None:
    with pytest.raises(ScenarioError, match=r"no scenario 'nope'.*mixed, peak, smoke"):
        load_scenario("nope", DEFAULT_FILE)


# -- traffic --------------------------------------------------------------------------------


def test_queries_follow_a_zipf_head_and_a_tail_of_one_offs() -> None:
    spec = Queries(popular=2000, zipf_s=1.0, unique_share=0.35, seed=3)
    mix = QueryMix(spec, salt=1)
    draws = [mix.next() for _ in range(40_000)]
    one_offs = [text for text, unique in draws if unique]
    popular = Counter(text for text, unique in draws if not unique)
    assert abs(len(one_offs) / len(draws) - 0.35) < 0.01
    assert len(set(one_offs)) == len(one_offs)  # never repeated
    assert not set(one_offs) & set(mix.popular)  # never a popular query
    # Zipf with s = 1 over 2000 ranks: rank 1 has 1/H(2000) = 12.2% of the popular draws,
    # rank 2 half of that, and the top 20 ranks about 43%.
    total = sum(popular.values())
    ranked = [popular[q] / total for q in mix.popular]
    assert 0.11 < ranked[0] < 0.135
    assert 0.45 < ranked[1] / ranked[0] < 0.55
    assert 0.40 < sum(ranked[:20]) < 0.46


def test_a_new_salt_changes_the_one_offs_but_not_the_popular_queries() -> None:
    spec = Queries(popular=50, seed=3)
    a, b = QueryMix(spec, salt=1), QueryMix(spec, salt=2)
    assert a.popular == b.popular
    tail_a = {t for t, u in (a.next() for _ in range(500)) if u}
    tail_b = {t for t, u in (b.next() for _ in range(500)) if u}
    assert not tail_a & tail_b


def test_the_cache_ceiling_grows_with_the_searches_and_falls_with_the_tail() -> None:
    spec = Queries(popular=2000, zipf_s=1.0, unique_share=0.35)
    short, long = expected_hit_ratio(spec, 200), expected_hit_ratio(spec, 20_000)
    assert 0 < short < long < 1 - spec.unique_share
    assert expected_hit_ratio(Queries(popular=2000, unique_share=0.8), 20_000) < long
    assert expected_hit_ratio(Queries(popular=1, unique_share=0.0), 100) == pytest.approx(0.99)


@pytest.mark.parametrize(("name", "rate"), [("mixed", 20.0), ("peak", 100.0), ("smoke", 3.0)])
def test_user_groups_add_up_to_the_planned_rate(name: str, rate: float) -> None:
    scenario = load_scenario(name, rate=rate)
    groups = user_groups(scenario)
    total = sum(g.users * g.rate_per_user for g in groups.values() if g.users)
    assert total == pytest.approx(rate)
    assert all(g.rate_per_user <= RATE_PER_USER + 1e-9 for g in groups.values() if g.users)
    shares = scenario.shares()
    text = groups["text"]
    assert text.users * text.rate_per_user == pytest.approx(rate * shares.get("text", 0))
    assert not text.keyed and groups["internal"].keyed


# -- figures --------------------------------------------------------------------------------


def _write_records(path: Path, rows: list[tuple[Any, ...]]) -> None:
    lines = [",".join(FIELDS)] + [",".join(str(v) for v in row) for row in rows]
    path.write_text("\n".join(lines) + "\n")


def test_latency_and_rates_are_drawn_from_every_request(tmp_path: Path) -> None:
    t0 = 1_000.0
    rows: list[tuple[Any, ...]] = [
        (t0 + i * 0.1, "text", float(i + 1), 200, "") for i in range(100)
    ]
    rows += [(t0 + 5.05, "image", 999.0, 503, "503: not ready")]
    rows += [(t0 + 9.5, "image", 50.0, 0, "ConnectionRefusedError")]
    path = tmp_path / "requests.csv"
    _write_records(path, rows[::-1])  # unsorted on purpose: read() sorts by start
    records = read(path)
    assert np.all(np.diff(records.start) >= 0)
    text = latency(records.of("text"))
    assert (text.count, text.errors) == (100, 0)
    assert text.p50 == pytest.approx(50.5) and text.max == 100
    everything = latency(records)
    assert (everything.count, everything.errors) == (102, 2)
    assert everything.p99 == pytest.approx(np.percentile(np.arange(1, 101), 99))
    assert records.error_counts() == {"503: not ready": 1, "ConnectionRefusedError": 1}


def test_a_records_file_with_other_columns_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "requests.csv"
    path.write_text("start,kind\n1,text\n")
    with pytest.raises(ValueError, match="expected"):
        read(path)


# -- the photo folder -----------------------------------------------------------------------


def test_the_owned_folder_is_reset_and_a_night_s_churn_is_exact(tmp_path: Path) -> None:
    folder = tmp_path / "photos"
    first = photoset.prepare(folder, 6)
    variants = sorted((folder / photoset.VARIANTS).iterdir())
    assert len(variants) == 6 and len(first) == 6 + len(photoset._originals(folder))
    assert len({p.read_bytes() for p in variants}) == 6  # six different photos
    mtimes = {p: p.stat().st_mtime_ns for p in variants}
    with Image.open(variants[0]) as image:
        assert image.format == "JPEG" and max(image.size) >= photoset.LONG_SIDE[0]

    churn = photoset.churn(folder, add=3, change=2, delete=1, seed=5)
    now = {p.name for p in (folder / photoset.VARIANTS).iterdir()}
    assert len(churn.added) == 3 and len(churn.changed) == 2 and len(churn.deleted) == 1
    assert {Path(a).name for a in churn.added} <= now
    assert not {Path(d).name for d in churn.deleted} & now
    changed = [folder / c for c in churn.changed]
    assert all(p.read_bytes() != b"" and p.stat().st_mtime_ns != mtimes[p] for p in changed)

    again = photoset.prepare(folder, 6)  # the next run starts from the same folder
    assert again == first
    kept = [p for p in variants if p not in changed and p.name not in churn.deleted[0]]
    assert all(p.stat().st_mtime_ns == mtimes[p] for p in kept)  # not rewritten


def test_churn_refuses_more_changes_than_photos(tmp_path: Path) -> None:
    photoset.prepare(tmp_path, 2)
    with pytest.raises(ValueError, match="cannot change 2 and delete 1 of 2"):
        photoset.churn(tmp_path, add=0, change=2, delete=1, seed=0)


# -- the command ----------------------------------------------------------------------------


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadtests.run", *args],
        cwd=ROOT,
        env=env or newcomer_env(),
        capture_output=True,
        text=True,
        timeout=1200,
    )


def test_without_a_running_system_it_says_what_to_do(tmp_path: Path) -> None:
    done = _run("--data-dir", str(tmp_path), "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert "no running `photosearch up`" in done.stderr and "--start" in done.stderr


def test_a_bad_scenario_stops_the_command_before_it_starts(tmp_path: Path) -> None:
    done = _run("--scenario", "nope", "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and "no scenario 'nope'" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("loadtest")


@pytest.fixture(scope="module")
def smoke_run(base: Path, repository: Path) -> tuple[Path, dict[str, Any]]:
    """The smoke scenario, run the way the README says, on a `photosearch up` it starts: on
    the tiny model, exported beforehand (test_up covers the first start's export of ViT-B-32;
    here it would only add a minute of export and a slower Triton to every request)."""
    shutil.copytree(repository, base / "data" / "models")
    out = base / "report"
    (api,) = free_ports(1)
    done = _run(
        *("--start", "--scenario", "smoke", "--variants", "30", "--port", str(api)),
        *("--data-dir", str(base / "data"), "--out", str(out)),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip() == str(out / "report.md")
    return out, json.loads((out / "summary.json").read_text())


def test_the_run_sends_the_planned_load_and_every_request_is_answered(
    smoke_run: tuple[Path, dict[str, Any]],
) -> None:
    out, summary = smoke_run
    # Every request Locust counted is in the records, and answered; a user's last request may
    # end after Locust wrote its stats. How many a run sends in its duration is the machine's
    # figure (the report's achieved rate), not a test's.
    with (out / "locust_stats.csv").open(newline="") as f:
        stats = {row["Name"]: int(row["Request Count"]) for row in csv.DictReader(f)}
    users = summary["users"]
    assert 0 < stats["Aggregated"] <= summary["all"]["count"] <= stats["Aggregated"] + users
    assert summary["all"]["errors"] == 0, summary["errors"]
    counts = {kind: figures["count"] for kind, figures in summary["kinds"].items()}
    for kind, count in counts.items():
        assert stats[kind] <= count <= stats[kind] + users, kind
    assert set(counts) == {"text", "image", "similar"}
    assert counts["text"] > counts["image"] and counts["text"] > counts["similar"]
    assert summary["achieved_rate"] > 0
    for figures in summary["kinds"].values():
        assert 0 < figures["p50"] <= figures["p90"] <= figures["p99"] <= figures["max"]


def test_the_cache_and_triton_figures_agree_with_each_other(
    smoke_run: tuple[Path, dict[str, Any]],
) -> None:
    _, summary = smoke_run
    cache, text = summary["cache"], summary["triton"]["text"]
    texts = summary["kinds"]["text"]["count"]
    # The API counted one lookup per text search (its metrics: answers tell only an
    # operator's key whether the cache answered).
    assert cache["hits"] + cache["misses"] + cache["bypass"] == texts
    # A cold cache: hits only where a popular query came back, never above the curve's
    # ceiling by more than chance.
    assert 0 < cache["hit_ratio"] <= summary["cache_hit_ratio_ceiling"] + 0.15
    # Every Triton call the API made for a text query arrived at Triton's text model, and only
    # misses made them (concurrent misses of one query share a call, so a few fewer).
    assert text["requests"] == cache["triton_calls"]
    assert 0.8 * (cache["misses"] + cache["bypass"]) <= text["requests"]
    assert text["requests"] <= cache["misses"] + cache["bypass"]
    assert text["batch"] >= 1 and text["queue_ms"] >= 0 and text["compute_ms"] > 0
    image = summary["triton"]["image"]
    assert image["requests"] >= summary["kinds"]["image"]["count"]


def test_the_nightly_sync_ran_in_the_middle_and_found_every_change(
    smoke_run: tuple[Path, dict[str, Any]],
) -> None:
    out, summary = smoke_run
    scenario = load_scenario("smoke")
    assert scenario.sync is not None
    sync = summary["sync"]
    # Sent while the load ran: requests were sent before it and after it.
    records = read(out / "requests.csv")
    t0 = float((out / "started").read_text())
    assert records.start.min() < t0 + sync["sent_at_s"] < records.start.max()
    assert sync["changes"] == {
        "added": scenario.sync.add,
        "changed": scenario.sync.change,
        "deleted": scenario.sync.delete,
    }
    job = sync["job"]
    assert job["state"] == "done" and job["failed"] == 0
    assert job["done"] == scenario.sync.add + scenario.sync.change
    assert job["deleted"] == scenario.sync.delete
    assert sync["finished_at_s"] > sync["sent_at_s"]


def test_the_report_has_its_figures_and_its_plots(smoke_run: tuple[Path, dict[str, Any]]) -> None:
    out, summary = smoke_run
    report = (out / "report.md").read_text()
    for heading in ("## Latency and throughput", "## Query cache", "## Triton", "## The nightly"):
        assert heading in report
    p99 = summary["all"]["p99"]
    assert f"| {p99:.1f} |" in report  # the table shows the summary's figures
    assert "](triton.png)" in report and "locust.html" in report
    with Image.open(out / "triton.png") as image:
        assert image.format == "PNG" and image.size[0] >= 800
    rows = (out / "requests.csv").read_text().splitlines()
    assert len(rows) - 1 == summary["all"]["count"]  # every request, one line each
    # Locust's own reports lie beside ours: its statistics by kind, as CSV and HTML.
    stats = (out / "locust_stats.csv").read_text()
    assert all(f",{kind}," in stats for kind in summary["kinds"])
    assert (out / "locust_failures.csv").exists()
    with (out / "locust_stats_history.csv").open(newline="") as f:
        history = {row["Name"] for row in csv.DictReader(f)}
    assert set(summary["kinds"]) | {"Aggregated"} <= history  # the full history, by kind
    assert "<html" in (out / "locust.html").read_text()
    # The internal apps had a key of their own, and the folder that may be shared keeps none.
    assert json.loads((out / "plan.json").read_text())["api_key"] == "<redacted>"
    assert not list(out.glob("**/*.jpg"))  # the uploads lived only as long as the run


@pytest.fixture(scope="module")
def running(base: Path, smoke_run: tuple[Path, dict[str, Any]]) -> Iterator[Up]:
    """A `photosearch up` started apart, as a user would, on the data the smoke run left (the
    model exported, the photos indexed): the default target of the command."""
    api, redis = free_ports(2)
    keys = [{"name": "ops", "sha256": hash_key(ADMIN_KEY), "scopes": ["search", "admin"]}]
    env = newcomer_env() | {"PHOTOSEARCH_API__KEYS": json.dumps(keys)}
    # The simulated visitors all come from this machine's address, as under `--start`
    # (loadtests/system.py): no per-address limit. At its default (5 a second, 20 at once) the
    # smoke scenario's Poisson arrivals, 5 a second, now and then run ahead of it by 20 and are
    # rightly answered 429, which is not what these tests are about.
    env["PHOTOSEARCH_API__ANONYMOUS_RATE_PER_S"] = "0"
    system = Up(base / "data", api, redis, env)
    system.start()
    try:
        yield system
    finally:
        system.stop()


def api_metrics(running: Up) -> str:
    """The API's metrics listener, as another deployment's operator would know it."""
    port = read_state(running.data_dir)["env"]["PHOTOSEARCH_API__METRICS_PORT"]
    return f"http://127.0.0.1:{port}/metrics"


def _short_run(out: Path, *args: str) -> dict[str, Any]:
    done = _run("--scenario", "smoke", "--duration", "10", "--out", str(out), *args)
    assert done.returncode == 0, done.stderr[-4000:]
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    assert summary["all"]["count"] > 0 and summary["all"]["errors"] == 0, summary["errors"]
    return summary


def test_by_default_it_loads_the_running_photosearch_up(running: Up, tmp_path: Path) -> None:
    summary = _short_run(tmp_path / "out", "--data-dir", str(running.data_dir))
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert plan["api_key"] is None  # no key was given: the internal apps search anonymously
    # Its settings came from up.json: Triton's counters were read, and a sync of the source
    # as it stands found nothing to do.
    assert summary["triton"]["text"]["requests"] == summary["cache"]["triton_calls"] > 0
    job = summary["sync"]["job"]
    assert summary["sync"]["changes"] == {"added": 0, "changed": 0, "deleted": 0}
    assert job["state"] == "done" and job["done"] == job["deleted"] == job["failed"] == 0
    assert job["unchanged"] > 0


def test_any_deployment_by_its_url_with_an_admin_key_for_the_sync(
    running: Up, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    summary = _short_run(
        out, "--url", running.url, "--api-metrics", api_metrics(running), "--admin-key", ADMIN_KEY
    )
    assert summary["triton"] == {"text": None, "image": None}  # not given --triton-metrics
    # The sync went through the admin API, and its job was read from there to the end.
    job = summary["sync"]["job"]
    assert job["kind"] == "sync" and job["state"] == "done" and job["unchanged"] > 0
    assert summary["sync"]["finished_at_s"] is not None
    report = (out / "report.md").read_text()
    assert "Triton's metrics were not read" in report and "## The nightly sync" in report


def test_without_redis_or_an_admin_key_no_sync_is_started(running: Up, tmp_path: Path) -> None:
    done = _run(
        "--scenario",
        "smoke",
        "--duration",
        "4",
        "--url",
        running.url,
        "--api-metrics",
        api_metrics(running),
        "--out",
        str(tmp_path / "out"),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "no sync: it needs the system's Redis" in done.stderr
    assert "sync" not in json.loads((tmp_path / "out" / "summary.json").read_text())
