"""The monitoring files under infra/monitoring: both Prometheus configs and the alert rules pass
promtool, the rules pass their unit tests, the Kubernetes relabeling names the jobs, the Grafana
dashboard loads on the provisioned datasource, and every metric they read is one that the API,
the indexer worker or Triton exports.

promtool is Debian's (`prometheus` package; `make test` installs it). It is built without
Kubernetes service discovery, so the Kubernetes config is checked with its discovery block
swapped for a static one, and its relabeling is run here by `relabel`.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from core.settings import RedisSettings, Settings
from harness.processes import free_ports
from indexer.metrics import IndexerMetrics
from query_api.http.metrics import Metrics
from tests.support.deployfiles import ROOT

MONITORING = ROOT / "infra" / "monitoring"
PROMETHEUS = MONITORING / "prometheus"
ALERTS = PROMETHEUS / "alerts.yml"
ALERTS_TEST = PROMETHEUS / "alerts_test.yml"
COMPOSE_CONFIG = PROMETHEUS / "prometheus.yml"
K8S_CONFIG = PROMETHEUS / "prometheus-k8s.yml"
GRAFANA = MONITORING / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "photosearch.json"
DATASOURCES = GRAFANA / "provisioning" / "datasources" / "prometheus.yml"
DASHBOARD_PROVIDERS = GRAFANA / "provisioning" / "dashboards" / "photosearch.yml"

JOBS = {"photosearch-api", "photosearch-worker", "triton"}
SEVERITIES = {"critical", "warning"}
ANNOTATIONS = {"summary", "description", "runbook"}

# Triton's metric names, as its documentation lists them (triton-inference-server/server,
# docs/user_guide/metrics.md: the "Counts", "Latencies / Counters", "GPU Metrics" and "CPU
# Metrics" tables, e.g. "Queue Time | `nv_inference_queue_duration_us` | Cumulative time
# requests spend waiting in the scheduling queue"). Counters, exported without `_total`.
TRITON_METRICS = frozenset(
    {
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
        "nv_gpu_utilization",
        "nv_gpu_memory_total_bytes",
        "nv_gpu_memory_used_bytes",
        "nv_gpu_power_usage",
        "nv_gpu_power_limit",
        "nv_energy_consumption",
        "nv_cpu_utilization",
        "nv_cpu_memory_total_bytes",
        "nv_cpu_memory_used_bytes",
    }
)

# Grafana's interval macros, replaced by a duration so that a panel's query parses as PromQL.
GRAFANA_MACROS = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "6h"}


def load_yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), f"{path}: not a YAML mapping"
    return data


def promtool(*args: str, cwd: Path = PROMETHEUS) -> subprocess.CompletedProcess[str]:
    """Runs promtool; a machine without it fails the test (never skips it)."""
    binary = shutil.which("promtool") or shutil.which("/usr/bin/promtool")
    if binary is None:
        pytest.fail(
            "promtool is missing: install Debian's prometheus package "
            "(apt-get install --no-install-recommends prometheus), as `make test` does"
        )
    return subprocess.run(
        [binary, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def assert_passes(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, (
        f"`{' '.join(map(str, result.args))}` exited {result.returncode}:\n"
        f"{result.stdout}\n{result.stderr}"
    )


def rules() -> list[dict[str, Any]]:
    return [rule for group in load_yaml(ALERTS)["groups"] for rule in group["rules"]]


def alert_rules() -> list[dict[str, Any]]:
    return [rule for rule in rules() if "alert" in rule]


def recorded_names() -> set[str]:
    return {rule["record"] for rule in rules() if "record" in rule}


def dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text())
    assert isinstance(data, dict)
    return data


def dashboard_targets() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(panel, target) for every query of the dashboard."""
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            yield panel, target


# --- promtool ---------------------------------------------------------------------------


def test_compose_prometheus_config_passes_promtool() -> None:
    result = promtool("check", "config", COMPOSE_CONFIG.name)
    assert_passes(result)
    assert "1 rule files found" in result.stdout, result.stdout


def test_k8s_prometheus_config_passes_promtool(tmp_path: Path) -> None:
    result = promtool("check", "config", K8S_CONFIG.name)
    if "field kubernetes_sd_configs not found" in result.stdout + result.stderr:
        # Debian's build: everything but the discovery block is still checked, rule file
        # included (resolved beside the config, so alerts.yml goes along).
        config = load_yaml(K8S_CONFIG)
        for job in config["scrape_configs"]:
            if job.pop("kubernetes_sd_configs", None) is not None:
                job["static_configs"] = [{"targets": ["10.0.0.1:8000"]}]
        (tmp_path / K8S_CONFIG.name).write_text(yaml.safe_dump(config))
        shutil.copy(ALERTS, tmp_path / ALERTS.name)
        result = promtool("check", "config", K8S_CONFIG.name, cwd=tmp_path)
    assert_passes(result)
    assert "1 rule files found" in result.stdout, result.stdout


def test_alert_rules_pass_promtool() -> None:
    assert_passes(promtool("check", "rules", ALERTS.name))


def test_alert_rules_pass_their_unit_tests() -> None:
    result = promtool("test", "rules", ALERTS_TEST.name)
    assert_passes(result)
    assert "SUCCESS" in result.stdout, result.stdout


def test_dashboard_queries_parse_as_promql(tmp_path: Path) -> None:
    """promtool parses each panel query, given as a recording rule (Grafana macros replaced)."""
    records = []
    for panel, target in dashboard_targets():
        expr = target["expr"]
        for macro, duration in GRAFANA_MACROS.items():
            expr = expr.replace(macro, duration)
        records.append({"record": f"panel_{panel['id']}_{target['refId']}", "expr": expr})
    assert records, "the dashboard has no queries"
    (tmp_path / "dashboard_rules.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]})
    )
    assert_passes(promtool("check", "rules", "dashboard_rules.yml", cwd=tmp_path))


# --- what the rules say -----------------------------------------------------------------


def test_every_alert_has_a_severity_summary_description_and_runbook() -> None:
    alerts = alert_rules()
    assert len(alerts) >= 10
    for rule in alerts:
        assert rule.get("labels", {}).get("severity") in SEVERITIES, rule["alert"]
        annotations = rule.get("annotations", {})
        missing = ANNOTATIONS - {key for key, text in annotations.items() if text.strip()}
        assert not missing, f"{rule['alert']} lacks annotations {sorted(missing)}"


def test_every_alert_has_a_unit_test_that_fires_it_and_one_that_does_not() -> None:
    tests = load_yaml(ALERTS_TEST)
    assert tests["rule_files"] == [ALERTS.name]
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    alerts = {rule["alert"] for rule in alert_rules()}
    assert alerts - fired == set(), "no unit test fires these alerts"
    assert alerts - quiet == set(), "no unit test checks these alerts stay quiet"
    assert (fired | quiet) - alerts == set(), "unit tests of alerts that do not exist"


# --- the scrape configs -----------------------------------------------------------------


def test_compose_config_scrapes_every_replica_of_each_job() -> None:
    config = load_yaml(COMPOSE_CONFIG)
    assert config["rule_files"] == [ALERTS.name]
    assert config["global"]["scrape_interval"] == "15s"
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) >= JOBS
    # Docker's DNS answers one A record per replica of a compose service.
    for name, service, port in (
        # The API's internal metrics listener (PHOTOSEARCH_API__METRICS_PORT).
        ("photosearch-api", "api", 9465),
        ("photosearch-worker", "worker", 9464),
    ):
        [dns] = jobs[name]["dns_sd_configs"]
        assert (dns["names"], dns["type"], dns["port"]) == ([service], "A", port), name
    assert jobs["triton"]["static_configs"] == [{"targets": ["triton:8002"]}]


def relabel(labels: dict[str, str], configs: list[dict[str, Any]]) -> dict[str, str] | None:
    """Prometheus's target relabeling, for the actions the configs use: regexes match the
    whole value, `$1` refers to a group, an empty result removes the target label. None: the
    target is dropped."""
    out = dict(labels)
    for config in configs:
        action = config.get("action", "replace")
        separator = config.get("separator", ";")
        value = separator.join(out.get(name, "") for name in config.get("source_labels", []))
        match = re.fullmatch(config.get("regex", "(.*)"), value)
        if action == "keep" and match is None:
            return None
        if action == "drop" and match is not None:
            return None
        if action == "replace" and match is not None:
            template = re.sub(r"\$\{?(\d+)\}?", r"\\g<\1>", config.get("replacement", "$1"))
            result = match.expand(template)
            if result:
                out[config["target_label"]] = result
            else:
                out.pop(config["target_label"], None)
        assert action in {"keep", "drop", "replace"}, f"relabel action {action} not emulated"
    return out


def pod_target(
    app: str, address: str, annotations: dict[str, str], phase: str = "Running"
) -> dict[str, str]:
    """The labels Kubernetes pod discovery gives one container port of a pod (address
    without a port: a container that declares none)."""
    target = {
        "__address__": address,
        "__meta_kubernetes_namespace": "photosearch",
        "__meta_kubernetes_pod_name": f"{app}-5d8f7-x2x9q",
        "__meta_kubernetes_pod_node_name": "node-a",
        "__meta_kubernetes_pod_phase": phase,
        "__meta_kubernetes_pod_label_app_kubernetes_io_name": app,
    }
    for key, value in annotations.items():
        target["__meta_kubernetes_pod_annotation_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)] = value
    return target


def scrape(port: str) -> dict[str, str]:
    return {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": port,
        "prometheus.io/path": "/metrics",
    }


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (
            pod_target("api", "10.1.0.5:8000", scrape("8000")),
            ("photosearch-api", "10.1.0.5:8000", "api-5d8f7-x2x9q"),
        ),
        (
            pod_target("worker", "10.1.0.6", scrape("9464")),
            ("photosearch-worker", "10.1.0.6:9464", "worker-5d8f7-x2x9q"),
        ),
        (
            pod_target("triton", "10.1.0.7:8001", scrape("8002")),
            ("triton", "10.1.0.7:8002", "triton-5d8f7-x2x9q"),
        ),
        (pod_target("api", "10.1.0.5:8000", {}), None),
        (pod_target("redis", "10.1.0.8:6379", scrape("6379")), None),
        (pod_target("api", "10.1.0.5:8000", scrape("8000"), phase="Pending"), None),
    ],
    ids=["api", "worker-no-ports", "triton-grpc-port", "not-annotated", "other-app", "pending"],
)
def test_k8s_config_names_each_job_from_the_pod_label(
    target: dict[str, str], expected: tuple[str, str, str] | None
) -> None:
    config = load_yaml(K8S_CONFIG)
    assert config["rule_files"] == [ALERTS.name]
    [pods] = [job for job in config["scrape_configs"] if "kubernetes_sd_configs" in job]
    [sd] = pods["kubernetes_sd_configs"]
    assert (sd["role"], sd["namespaces"]["names"]) == ("pod", ["photosearch"])
    # Prometheus adds these before relabeling.
    start = {"job": pods["job_name"], "__metrics_path__": pods.get("metrics_path", "/metrics")}
    labels = relabel({**start, **target}, pods["relabel_configs"])
    if expected is None:
        assert labels is None
        return
    assert labels is not None
    job, address, instance = expected
    assert (labels["job"], labels["__address__"], labels["instance"]) == (job, address, instance)
    assert (labels["__metrics_path__"], labels["namespace"]) == ("/metrics", "photosearch")


# --- Grafana ----------------------------------------------------------------------------


def test_dashboard_loads_and_its_panels_use_the_provisioned_datasource() -> None:
    data = dashboard()
    assert data["uid"] and data["title"] and isinstance(data["schemaVersion"], int)
    uids = {source["uid"] for source in load_yaml(DATASOURCES)["datasources"]}
    panels = data["panels"]
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for panel in panels:
        grid = panel["gridPos"]
        assert all(isinstance(grid[key], int) for key in ("x", "y", "w", "h")), panel["title"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] in uids, panel["title"]
        assert panel["targets"], f"{panel['title']} has no query"
    for panel, target in dashboard_targets():
        assert target.get("expr", "").strip(), f"{panel['title']} {target['refId']}: no expr"
        assert target["datasource"]["uid"] in uids, f"{panel['title']} {target['refId']}"
    assert {panel["type"] for panel in panels} >= {"timeseries", "stat"}


def test_grafana_loads_the_dashboards_folder() -> None:
    [provider] = load_yaml(DASHBOARD_PROVIDERS)["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    [source] = load_yaml(DATASOURCES)["datasources"]
    assert (source["type"], source["url"]) == ("prometheus", "http://prometheus:9090")


# --- metric names -----------------------------------------------------------------------

_QUOTED = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|`[^`]*`")
_IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_OURS = re.compile(r"(?:photosearch|nv)_[a-z0-9_]+")


def names_read(expr: str) -> set[str]:
    """The metrics an expression reads that are ours (photosearch_*, nv_*), and the recording
    rules (level:metric:operations) it reads. Whole identifiers outside quotes, so that
    route:photosearch_http_requests:rate5m is one recorded name, not a metric."""
    identifiers = _IDENTIFIER.findall(_QUOTED.sub('""', expr))
    return {name for name in identifiers if _OURS.fullmatch(name) or name.count(":") == 2}


def exported_names(registry: CollectorRegistry) -> set[str]:
    """The series names a registry exposes: prometheus_client names a counter's family
    without `_total`, a histogram's without `_bucket`, `_sum` and `_count`."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    return {
        family.name + suffix
        for family in registry.collect()
        for suffix in suffixes.get(family.type, ("",))
    }


def test_names_read_sees_metrics_and_recorded_names_not_labels_or_strings() -> None:
    expr = (
        'sum by (route) (rate(photosearch_http_errors_total{job="photosearch-api", '
        'route=~"/v1/photosearch_x"}[5m])) / route:photosearch_http_requests:rate5m'
        " / nv_inference_count offset 1m"
    )
    assert names_read(expr) == {
        "photosearch_http_errors_total",
        "route:photosearch_http_requests:rate5m",
        "nv_inference_count",
    }


def test_every_metric_the_rules_and_the_dashboard_read_is_exported() -> None:
    api = exported_names(Metrics().registry)
    # A Redis nobody listens on: the queue gauges' families are still there, without samples.
    port = free_ports(1)[0]
    settings = Settings(redis=RedisSettings(url=f"redis://127.0.0.1:{port}/0"))
    indexer = exported_names(IndexerMetrics(settings).registry)
    recorded = recorded_names()

    read: dict[str, set[str]] = {}
    for rule in rules():
        where = rule.get("alert") or rule["record"]
        for name in names_read(rule["expr"]):
            read.setdefault(name, set()).add(f"alerts.yml {where}")
    for panel, target in dashboard_targets():
        for name in names_read(target["expr"]):
            read.setdefault(name, set()).add(f"dashboard '{panel['title']}'")

    unknown = {
        name: sorted(where)
        for name, where in read.items()
        if name not in api | indexer | TRITON_METRICS | recorded
    }
    assert not unknown, f"metrics that nothing exports: {json.dumps(unknown, indent=2)}"
    # Each source is read, and the recorded names are used, so the check above is not vacuous.
    for source in (api, indexer, TRITON_METRICS, recorded):
        assert set(read) & source
