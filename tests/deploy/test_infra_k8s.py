"""The deployment under infra/ (kustomize, Helm values, adapter rules): valid, and true to the code.

No kustomize, kubectl or helm runs here: `build` applies the few kustomize features the
kustomizations use (and fails on any other), the Kubernetes objects are checked against the
API schemas kubernetes-validate ships, KEDA's and the Qdrant chart's against schemas vendored
under tests/data/.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from fastapi.routing import APIRoute

from core.settings import QdrantSettings, Settings
from core.taskqueue import all_queues, embed_queue, plan_queue
from core.vectorstore import footprint
from core.vectorstore.footprint import GiB
from model.triton_server import control_flags
from query_api.http.metrics import Metrics
from query_api.routes.health import router as health_router
from tests.support.deployfiles import (
    ROOT,
    export_options,
    python_backend_flags,
    setting_variables,
)

K8S = ROOT / "infra" / "k8s"
BASE = K8S / "base"
DATA = Path(__file__).parent.parent / "data"
ADAPTER_VALUES = K8S / "monitoring" / "prometheus-adapter-values.yaml"
QDRANT_VALUES = ROOT / "infra" / "qdrant" / "values.yaml"
# infra/monitoring's Prometheus configuration for Kubernetes (pods found by annotation).
SCRAPE_CONFIG = ROOT / "infra" / "monitoring" / "prometheus" / "prometheus-k8s.yml"
# The newest Kubernetes whose schemas kubernetes-validate ships.
KUBERNETES_VERSION = "1.37.0"

Doc = dict[str, Any]

# What `build` applies; anything else in a kustomization fails the test rather than being
# silently skipped.
KUSTOMIZE_FIELDS = {"apiVersion", "kind", "namespace", "labels", "resources", "images", "patches"}
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"}
CLUSTER_SCOPED = {"Namespace"}
PHOTOSEARCH_IMAGE = "ghcr.io/photostock/photosearch"
# NGC's tritonserver with onnxruntime-gpu for the python backend (compose builds it).
TRITON_IMAGE = "ghcr.io/photostock/photosearch-triton-gpu"
TRITON_DOCKERFILE = "infra/docker/triton-gpu.Dockerfile"
# Triton's health endpoints (KServe v2 protocol).
TRITON_HEALTH = {"/v2/health/ready", "/v2/health/live"}
# The Qdrant Helm release is named "qdrant": its Service is too.
QDRANT_RELEASE = "qdrant"


def load_all(path: Path) -> list[Doc]:
    with path.open() as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def load_one(path: Path) -> Doc:
    (doc,) = load_all(path)
    return doc


def pod_template(doc: Doc) -> Doc | None:
    if doc["kind"] not in WORKLOADS:
        return None
    spec = doc["spec"]["jobTemplate"]["spec"] if doc["kind"] == "CronJob" else doc["spec"]
    template: Doc = spec["template"]
    return template


def containers(doc: Doc) -> list[Doc]:
    template = pod_template(doc)
    if template is None:
        return []
    spec = template["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def declared_ports(containers: list[Doc]) -> set[str | int]:
    """What a probe or a Service may name: the containers' port names and numbers."""
    ports = [p for c in containers for p in c.get("ports", [])]
    return {p["name"] for p in ports if "name" in p} | {p["containerPort"] for p in ports}


def argv(container: Doc) -> list[str]:
    """The command line a container runs (the photosearch images' entrypoint is photosearch)."""
    return [*container.get("command", []), *container.get("args", [])]


def apply_json_patch(doc: Doc, op: Doc) -> None:
    assert op["op"] in ("add", "replace"), f"patch op {op['op']} is not applied by this test"
    keys = [k.replace("~1", "/").replace("~0", "~") for k in op["path"].split("/")[1:]]
    node: Any = doc
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    last = keys[-1]
    if isinstance(node, list):
        index = len(node) if last == "-" else int(last)
        if op["op"] == "replace":
            node[index] = op["value"]
        else:
            node.insert(index, op["value"])
    else:
        assert op["op"] == "add" or last in node, f"replace of a missing {op['path']}"
        node[last] = op["value"]


def build(directory: Path) -> list[Doc]:
    """`kustomize build`, for the features these kustomizations use."""
    kustomization = load_one(directory / "kustomization.yaml")
    unknown = set(kustomization) - KUSTOMIZE_FIELDS
    assert not unknown, f"{directory}: kustomize fields this test does not apply: {unknown}"
    docs: list[Doc] = []
    for entry in kustomization.get("resources", []):
        path = directory / entry
        docs.extend(build(path) if path.is_dir() else load_all(path))
    namespace = kustomization.get("namespace")
    for doc in docs:
        if namespace and doc["kind"] not in CLUSTER_SCOPED:
            doc["metadata"]["namespace"] = namespace
        for label in kustomization.get("labels", []):
            assert not label.get("includeSelectors"), "labels in selectors: not applied here"
            doc["metadata"].setdefault("labels", {}).update(label["pairs"])
            template = pod_template(doc)
            if label.get("includeTemplates") and template is not None:
                template.setdefault("metadata", {}).setdefault("labels", {}).update(label["pairs"])
        for image in kustomization.get("images", []):
            for container in containers(doc):
                name = container["image"].rsplit(":", 1)[0]
                if name == image["name"]:
                    container["image"] = f"{image.get('newName', name)}:{image['newTag']}"
    for patch in kustomization.get("patches", []):
        target = patch["target"]
        matched = [
            d for d in docs if all(d["metadata"].get(k, d.get(k)) == v for k, v in target.items())
        ]
        assert matched, f"{directory}: patch target {target} matches nothing"
        for doc in matched:
            for op in yaml.safe_load(patch["patch"]):
                apply_json_patch(doc, op)
    return docs


@pytest.fixture(scope="module", params=["base", "overlays/production"])
def manifests(request: pytest.FixtureRequest) -> list[Doc]:
    return build(K8S / str(request.param))


def of_kind(docs: list[Doc], kind: str) -> dict[str, Doc]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def one(docs: list[Doc], kind: str, name: str) -> Doc:
    found = of_kind(docs, kind)
    assert name in found, f"no {kind} {name}"
    return found[name]


def container_of(docs: list[Doc], kind: str, name: str) -> Doc:
    (container,) = containers(one(docs, kind, name))
    return container


def secret_examples() -> dict[str, Doc]:
    """The Secrets made out of band, by name, as secret.example.yaml shows them."""
    return {d["metadata"]["name"]: d for d in load_all(BASE / "secret.example.yaml")}


def secret_example() -> Doc:
    """photosearch-secrets, what every PhotoSearch pod reads (envFrom)."""
    return secret_examples()["photosearch-secrets"]


@pytest.fixture
def settings(manifests: list[Doc], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings the pods get from the ConfigMap (which must also parse)."""
    for name in list(os.environ):
        if name.upper().startswith("PHOTOSEARCH_"):
            monkeypatch.delenv(name)
    for name, value in one(manifests, "ConfigMap", "photosearch-config")["data"].items():
        monkeypatch.setenv(name, value)
    return Settings()


def quantity(value: str | int) -> float:
    """A Kubernetes quantity (`6Gi`, `500m`, `2`) as a number."""
    binary = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    units = {"": 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, **binary}
    match = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(value))
    assert match and match[2] in units, f"not a quantity: {value}"
    return float(match[1]) * units[match[2]]


def redis_bytes(value: str) -> int:
    """Redis's memory units: k/m/g are powers of 1000, kb/mb/gb powers of 1024."""
    units = {"": 1, "k": 10**3, "kb": 2**10, "m": 10**6, "mb": 2**20, "g": 10**9, "gb": 2**30}
    match = re.fullmatch(r"(\d+)([a-z]*)", value.lower())
    assert match and match[2] in units, f"not a Redis memory size: {value}"
    return int(match[1]) * units[match[2]]


def redis_conf(text: str) -> dict[str, str]:
    lines = (line.strip() for line in text.splitlines())
    pairs = (line.split(None, 1) for line in lines if line and not line.startswith("#"))
    return {pair[0]: pair[1] if len(pair) > 1 else "" for pair in pairs}


# --- the manifests are valid Kubernetes objects ---


def test_every_manifest_validates_against_the_kubernetes_api_schema(manifests: list[Doc]) -> None:
    keda = json.loads((DATA / "keda-scaledobject.schema.json").read_text())
    for doc in manifests:
        label = f"{doc['kind']} {doc['metadata']['name']}"
        if doc["kind"] == "ScaledObject":
            # The API server rejects unknown fields of a custom resource (kubectl's strict
            # field validation): close every object the CRD describes, as strict=True does.
            jsonschema.Draft7Validator(closed(keda)).validate(doc)
            continue
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{label}: {exc.message} at {list(exc.path)}")


def closed(schema: Any) -> Any:
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: closed(value) for key, value in schema.items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def test_every_file_of_the_base_is_deployed_except_the_secret_example() -> None:
    listed = set(load_one(BASE / "kustomization.yaml")["resources"])
    files = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert files - listed == {"secret.example.yaml"}
    assert listed <= files


def test_production_pins_images_and_serves_its_host() -> None:
    docs = build(K8S / "overlays" / "production")
    for doc in docs:
        for container in containers(doc):
            tag = container["image"].rsplit(":", 1)[-1]
            assert "/" not in tag and tag != "latest", container["image"]
    # Each image the overlay pins is one the base runs: a stale name would pin nothing.
    run = {c["image"].rsplit(":", 1)[0] for d in build(BASE) for c in containers(d)}
    pinned = {
        i["name"]
        for i in load_one(K8S / "overlays" / "production" / "kustomization.yaml")["images"]
    }
    assert pinned <= run, pinned - run
    ingress = one(docs, "Ingress", "api")
    assert ingress["spec"]["rules"][0]["host"] == "photos-api.photostock.example"
    assert ingress["spec"]["tls"][0]["hosts"] == ["photos-api.photostock.example"]
    kustomization = load_one(BASE / "kustomization.yaml")
    assert kustomization["namespace"] == "photosearch"
    assert all(
        d["metadata"].get("namespace") == "photosearch"
        for d in docs
        if d["kind"] not in CLUSTER_SCOPED
    )
    assert all(d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "photosearch" for d in docs)


# --- they agree with the code ---


def test_every_photosearch_variable_is_a_real_setting(manifests: list[Doc]) -> None:
    used = set(one(manifests, "ConfigMap", "photosearch-config")["data"])
    for secret in secret_examples().values():
        used |= set(secret["stringData"])
    for doc in manifests:
        for container in containers(doc):
            used |= {e["name"] for e in container.get("env", [])}
    unknown = {n for n in used if n.startswith("PHOTOSEARCH_")} - setting_variables()
    assert not unknown, f"not settings of core/settings.py: {sorted(unknown)}"


def test_probes_ask_the_endpoints_each_server_has(manifests: list[Doc]) -> None:
    api_paths = {r.path for r in health_router.routes if isinstance(r, APIRoute)}
    assert "/v2/health/ready" in (ROOT / "model" / "triton_server.py").read_text()
    # The workers' /metrics is prometheus_client's own server.
    endpoints = {TRITON_IMAGE: TRITON_HEALTH, PHOTOSEARCH_IMAGE: {*api_paths, "/metrics"}}
    for doc in manifests:
        for container in containers(doc):
            ports = declared_ports([container])
            known = endpoints.get(container["image"].rsplit(":", 1)[0], set())
            for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                http = container.get(kind, {}).get("httpGet")
                if http is not None:
                    where = f"{doc['metadata']['name']} {kind}"
                    assert http["path"] in known, f"{where}: no such endpoint {http['path']}"
                    assert http["port"] in ports, f"{where}: port {http['port']} not declared"
    api = container_of(manifests, "Deployment", "api")
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    triton = container_of(manifests, "Deployment", "triton")
    assert triton["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert triton["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"


def test_services_select_pods_and_their_ports(manifests: list[Doc]) -> None:
    templates = [t for d in manifests if (t := pod_template(d)) is not None]

    def selected(selector: dict[str, str]) -> list[Doc]:
        return [t for t in templates if selector.items() <= t["metadata"]["labels"].items()]

    for name, service in of_kind(manifests, "Service").items():
        pods = selected(service["spec"]["selector"])
        assert pods, f"Service {name} selects no pod"
        ports = declared_ports([c for t in pods for c in t["spec"]["containers"]])
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, f"Service {name}: no port {port['targetPort']}"
    for doc in manifests:
        template = pod_template(doc)
        if template is not None and "selector" in doc["spec"]:
            own = doc["spec"]["selector"]["matchLabels"].items()
            assert own <= template["metadata"]["labels"].items(), doc["metadata"]["name"]
    for name, pdb in of_kind(manifests, "PodDisruptionBudget").items():
        assert selected(pdb["spec"]["selector"]["matchLabels"]), f"PDB {name} selects no pod"
    for name, statefulset in of_kind(manifests, "StatefulSet").items():
        assert statefulset["spec"]["serviceName"] in of_kind(manifests, "Service"), name
    for rule in one(manifests, "Ingress", "api")["spec"]["rules"]:
        for path in rule["http"]["paths"]:
            backend = path["backend"]["service"]
            service = one(manifests, "Service", backend["name"])
            assert backend["port"]["name"] in {p["name"] for p in service["spec"]["ports"]}


def pod_scrape_job() -> Doc:
    jobs: list[Doc] = load_one(SCRAPE_CONFIG)["scrape_configs"]
    (job,) = [
        job
        for job in jobs
        if any(sd["role"] == "pod" for sd in job.get("kubernetes_sd_configs", []))
    ]
    return job


def relabelled_to(source: str) -> str:
    """The label the pod scrape job copies a discovery label into, unchanged."""
    for rule in pod_scrape_job()["relabel_configs"]:
        copies = rule.get("action", "replace") == "replace" and "replacement" not in rule
        if rule.get("source_labels") == [source] and copies:
            target: str = rule["target_label"]
            return target
    raise AssertionError(f"the pod scrape job keeps no {source}")


def test_prometheus_scrapes_every_annotated_pod(manifests: list[Doc]) -> None:
    job = pod_scrape_job()
    namespaces = {n for sd in job["kubernetes_sd_configs"] for n in sd["namespaces"]["names"]}
    keeps = [
        rule["regex"]
        for rule in job["relabel_configs"]
        if rule.get("action") == "keep"
        and rule["source_labels"] == ["__meta_kubernetes_pod_label_app_kubernetes_io_name"]
    ]
    for doc in manifests:
        template = pod_template(doc)
        annotations = {} if template is None else template["metadata"].get("annotations", {})
        if template is None or annotations.get("prometheus.io/scrape") != "true":
            continue
        assert doc["metadata"]["namespace"] in namespaces
        name = template["metadata"]["labels"]["app.kubernetes.io/name"]
        for regex in keeps:
            assert re.fullmatch(regex, name), f"{doc['metadata']['name']}: Prometheus drops {name}"


def adapter_rules() -> list[Doc]:
    rules: list[Doc] = load_one(ADAPTER_VALUES)["rules"]["custom"]
    return rules


def test_autoscalers_scale_deployments_on_metrics_the_adapter_serves(
    manifests: list[Doc],
) -> None:
    deployments = of_kind(manifests, "Deployment")
    served = {rule["name"]["as"] for rule in adapter_rules()}
    scalers = [
        *of_kind(manifests, "HorizontalPodAutoscaler").values(),
        *of_kind(manifests, "ScaledObject").values(),
    ]
    assert {s["spec"]["scaleTargetRef"]["name"] for s in scalers} == {"api", "worker", "triton"}
    for scaler in scalers:
        target = scaler["spec"]["scaleTargetRef"]
        assert target["kind"] == "Deployment" and target["name"] in deployments, target
        # A fixed spec.replicas would be reset by every `kubectl apply`, fighting the scaler.
        assert "replicas" not in deployments[target["name"]]["spec"], target["name"]
        for metric in scaler["spec"].get("metrics", []):
            if metric["type"] == "Pods":
                name = metric["pods"]["metric"]["name"]
                assert name in served, f"{scaler['metadata']['name']}: adapter serves no {name}"


def test_workers_scale_on_the_real_embed_queue(manifests: list[Doc], settings: Settings) -> None:
    scaled_object = one(manifests, "ScaledObject", "worker")
    (trigger,) = scaled_object["spec"]["triggers"]
    assert trigger["type"] == "redis"
    meta = trigger["metadata"]
    assert meta["listName"] == embed_queue(settings)
    # KEDA runs in its own namespace: the address is the broker Service's full name.
    host, port = meta["address"].rsplit(":", 1)
    broker = urlsplit(settings.redis.url)
    namespace = scaled_object["metadata"].get("namespace", "photosearch")
    assert host == f"{broker.hostname}.{namespace}.svc.cluster.local"
    assert int(port) == broker.port
    assert meta.get("databaseIndex", "0") == (broker.path.lstrip("/") or "0")
    assert int(meta["listLength"]) >= 1
    # The scaled workers plan and embed; some worker takes each queue.
    every = set(all_queues(settings))
    consumed: dict[str, set[str]] = {}
    for name, deployment in of_kind(manifests, "Deployment").items():
        for container in containers(deployment):
            args = argv(container)
            if args[:2] == ["photosearch", "worker"]:
                queues = args[args.index("--queues") + 1] if "--queues" in args else None
                consumed[name] = set(queues.split(",")) if queues else every
    assert consumed["worker"] == {plan_queue(settings), embed_queue(settings)}
    assert set().union(*consumed.values()) == every


def test_addresses_in_the_config_are_services_of_the_deployment(
    manifests: list[Doc], settings: Settings
) -> None:
    services = of_kind(manifests, "Service")
    qdrant_ports = {
        p["port"] for p in load_one(DATA / "qdrant-chart-values.yaml")["service"]["ports"]
    }
    assert settings.redis.cache_url is not None
    for url in (
        settings.redis.url,
        settings.redis.cache_url,
        f"//{settings.triton.url}",
        settings.qdrant.url,
    ):
        assert url is not None
        parts = urlsplit(url)
        if parts.hostname == QDRANT_RELEASE:
            assert parts.port in qdrant_ports, url
            continue
        assert parts.hostname in services, f"{url}: no Service {parts.hostname}"
        ports = {p["port"] for p in services[parts.hostname]["spec"]["ports"]}
        assert parts.port in ports, f"{url}: Service {parts.hostname} has no port {parts.port}"
    assert settings.redis.cache_url != settings.redis.url


def test_ports_agree_with_the_settings(
    manifests: list[Doc], settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    def scraped(name: str) -> int:
        template = pod_template(one(manifests, "Deployment", name))
        assert template is not None
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/path"] == "/metrics"
        port = int(annotations["prometheus.io/port"])
        assert port in declared_ports(template["spec"]["containers"]), (
            f"{name}: scraped port {port} is not a container port"
        )
        return port

    # The API's metrics listener, on the pod's address: the settings its own env adds.
    for variable in container_of(manifests, "Deployment", "api")["env"]:
        if variable["name"].startswith("PHOTOSEARCH_"):
            monkeypatch.setenv(variable["name"], variable["value"])
    api_settings = Settings()
    assert api_settings.api.metrics_host == "0.0.0.0"
    assert scraped("api") == api_settings.api.metrics_port != settings.api.port
    # The Service the Ingress uses reaches the API's port, never its metrics.
    (service_port,) = one(manifests, "Service", "api")["spec"]["ports"]
    api_ports = container_of(manifests, "Deployment", "api")["ports"]
    assert {p["name"]: p["containerPort"] for p in api_ports}[service_port["targetPort"]] == (
        settings.api.port
    )
    assert scraped("worker") == settings.indexer.metrics_port
    assert scraped("worker-control") == settings.indexer.metrics_port
    triton = container_of(manifests, "Deployment", "triton")
    args = dict(a.removeprefix("--").split("=", 1) for a in triton["args"])
    assert scraped("triton") == int(args["metrics-port"])
    assert int(args["grpc-port"]) == int(settings.triton.url.rsplit(":", 1)[1])
    api = argv(container_of(manifests, "Deployment", "api"))
    assert api[:3] == ["photosearch", "api", "serve"]
    assert api[api.index("--port") + 1] == str(settings.api.port)


# --- who may reach what: NetworkPolicies and Triton's control key ---

# Where infra/monitoring's Prometheus runs (prometheus-k8s.yml), and the namespaces of the
# ingress-nginx controller and of some other tenant of the cluster.
MONITORING = "monitoring"
PROMETHEUS = {"app.kubernetes.io/name": "prometheus"}
INGRESS_NGINX = ("ingress-nginx", {"app.kubernetes.io/name": "ingress-nginx"})


def selects(selector: Doc, labels: dict[str, str]) -> bool:
    """A LabelSelector against a set of labels (an empty selector selects everything)."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        value = labels.get(expression["key"])
        ok = {
            "In": value in expression.get("values", []),
            "NotIn": value not in expression.get("values", []),
            "Exists": value is not None,
            "DoesNotExist": value is None,
        }[expression["operator"]]
        if not ok:
            return False
    return True


def container_port(template: Doc, port: str | int) -> int:
    """A port a NetworkPolicy names (by number or by the containers' port name), as a number."""
    if isinstance(port, int):
        return port
    named = {
        p["name"]: p["containerPort"] for c in template["spec"]["containers"] for p in c["ports"]
    }
    assert port in named, f"no container port named {port}"
    return int(named[port])


def admits(
    manifests: list[Doc], target: str, port: int, namespace: str, labels: dict[str, str]
) -> bool:
    """Whether a pod in `namespace` with `labels` may open `port` of Deployment `target`'s pods,
    by the NetworkPolicies of the deployment (ingress rules are OR-ed; within a peer, a
    namespaceSelector and a podSelector are AND-ed; a rule without `from` or `ports` admits
    any source or any port)."""
    deployment = one(manifests, "Deployment", target)
    template = pod_template(deployment)
    assert template is not None
    home = deployment["metadata"]["namespace"]
    policies = [
        p
        for p in of_kind(manifests, "NetworkPolicy").values()
        if p["metadata"]["namespace"] == home
        and "Ingress" in p["spec"]["policyTypes"]
        and selects(p["spec"]["podSelector"], template["metadata"]["labels"])
    ]
    if not policies:
        return True  # a pod no policy selects is not isolated

    def peer_matches(peer: Doc) -> bool:
        assert "ipBlock" not in peer, "ipBlock peers are not modelled here"
        in_namespace = (
            namespace == home
            if "namespaceSelector" not in peer
            else selects(peer["namespaceSelector"], {"kubernetes.io/metadata.name": namespace})
        )
        return in_namespace and selects(peer.get("podSelector", {}), labels)

    for policy in policies:
        for rule in policy["spec"].get("ingress", []):
            ports = [container_port(template, p["port"]) for p in rule.get("ports", [])]
            if (not ports or port in ports) and (
                "from" not in rule or any(peer_matches(peer) for peer in rule["from"])
            ):
                return True
    return False


def pod_labels(manifests: list[Doc], kind: str, name: str) -> dict[str, str]:
    template = pod_template(one(manifests, kind, name))
    assert template is not None
    labels: dict[str, str] = template["metadata"]["labels"]
    return labels


def test_network_policies_select_pods_and_name_their_ports(manifests: list[Doc]) -> None:
    templates = [t for d in manifests if (t := pod_template(d)) is not None]
    for name, policy in of_kind(manifests, "NetworkPolicy").items():
        selected = [
            t for t in templates if selects(policy["spec"]["podSelector"], t["metadata"]["labels"])
        ]
        assert selected, f"NetworkPolicy {name} selects no pod"
        for rule in policy["spec"]["ingress"]:
            for port in rule.get("ports", []):
                for template in selected:
                    container_port(template, port["port"])  # declared by every pod selected
    assert {"triton", "api"} <= set(of_kind(manifests, "NetworkPolicy"))


def test_only_the_api_and_the_workers_reach_triton_and_prometheus_its_metrics(
    manifests: list[Doc], settings: Settings
) -> None:
    template = pod_template(one(manifests, "Deployment", "triton"))
    assert template is not None
    grpc = int(settings.triton.url.rsplit(":", 1)[1])
    http = container_port(template, "http")
    metrics = int(template["metadata"]["annotations"]["prometheus.io/port"])
    ns = "photosearch"
    for client in ("api", "worker", "worker-control"):
        labels = pod_labels(manifests, "Deployment", client)
        assert admits(manifests, "triton", grpc, ns, labels), client
        assert admits(manifests, "triton", http, ns, labels), client
        assert not admits(manifests, "triton", metrics, ns, labels), client
        # The same labels in another namespace are someone else's pods.
        assert not admits(manifests, "triton", grpc, "default", labels), client
    for other in [
        ("Deployment", "beat"),
        ("CronJob", "model-export"),
        ("StatefulSet", "redis-cache"),
    ]:
        labels = pod_labels(manifests, *other)
        for port in (grpc, http, metrics):
            assert not admits(manifests, "triton", port, ns, labels), (other, port)
    assert admits(manifests, "triton", metrics, MONITORING, PROMETHEUS)
    assert not admits(manifests, "triton", grpc, MONITORING, PROMETHEUS)
    assert not admits(manifests, "triton", http, MONITORING, PROMETHEUS)
    grafana = {"app.kubernetes.io/name": "grafana"}
    assert not admits(manifests, "triton", metrics, MONITORING, grafana)
    assert not admits(manifests, "triton", metrics, ns, PROMETHEUS)
    assert not admits(manifests, "triton", grpc, *INGRESS_NGINX)


def test_the_api_serves_anyone_and_its_metrics_only_prometheus(
    manifests: list[Doc], settings: Settings
) -> None:
    template = pod_template(one(manifests, "Deployment", "api"))
    assert template is not None
    metrics = int(template["metadata"]["annotations"]["prometheus.io/port"])
    assert metrics != settings.api.port
    worker = pod_labels(manifests, "Deployment", "worker")
    for namespace, labels in [INGRESS_NGINX, ("photosearch", worker), ("default", {})]:
        assert admits(manifests, "api", settings.api.port, namespace, labels), namespace
        assert not admits(manifests, "api", metrics, namespace, labels), namespace
    assert admits(manifests, "api", metrics, MONITORING, PROMETHEUS)
    assert not admits(manifests, "api", metrics, MONITORING, {"app.kubernetes.io/name": "grafana"})
    # The adapter and the docs point at that Prometheus.
    adapter = urlsplit(load_one(ADAPTER_VALUES)["prometheus"]["url"])
    assert adapter.hostname == f"prometheus.{MONITORING}.svc"


def test_triton_model_control_demands_the_key_only_triton_holds(manifests: list[Doc]) -> None:
    variable = "PHOTOSEARCH_TRITON__CONTROL_KEY"
    triton = container_of(manifests, "Deployment", "triton")
    # The flags model/triton_server.py gives the local server, the key from the pod's env
    # (Kubernetes expands $(VAR) in args from the container's env).
    for flag in control_flags(f"$({variable})"):
        assert flag in triton["args"], flag
    [env] = [e for e in triton["env"] if e["name"] == variable]
    reference = env["valueFrom"]["secretKeyRef"]
    secrets = secret_examples()
    assert reference["key"] in secrets[reference["name"]]["stringData"]
    assert reference["name"] != secret_example()["metadata"]["name"], "not in every pod's Secret"
    holders = set()
    for doc in manifests:
        for container in containers(doc):
            sources = [
                e.get("valueFrom", {}).get("secretKeyRef", {}) for e in container.get("env", [])
            ]
            sources += [s.get("secretRef", {}) for s in container.get("envFrom", [])]
            if any(source.get("name") == reference["name"] for source in sources):
                holders.add(doc["metadata"]["name"])
            # Whatever loads models into Triton must hold the key too.
            if argv(container)[:3] == ["photosearch", "triton", "load"]:
                assert doc["metadata"]["name"] in holders, doc["metadata"]["name"]
    assert holders == {"triton"}


def test_pod_references_resolve_and_only_the_export_writes_the_models(
    manifests: list[Doc], settings: Settings
) -> None:
    claims = of_kind(manifests, "PersistentVolumeClaim")
    config_maps = of_kind(manifests, "ConfigMap")
    for doc in manifests:
        template = pod_template(doc)
        if template is None:
            continue
        volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
        volumes |= {c["metadata"]["name"]: c for c in doc["spec"].get("volumeClaimTemplates", [])}
        for volume in volumes.values():
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps
        for container in containers(doc):
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    assert source["configMapRef"]["name"] in config_maps
                else:
                    assert source["secretRef"]["name"] == secret_example()["metadata"]["name"]
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes, f"{doc['metadata']['name']}: {mount['name']}"
                claim = volumes[mount["name"]].get("persistentVolumeClaim", {})
                if claim.get("claimName") == "photosearch-models":
                    assert mount["mountPath"] == str(settings.repository)
                    # Only the export writes the repository.
                    writer = doc["metadata"]["name"] == "model-export"
                    assert mount.get("readOnly", False) is not writer, doc["metadata"]["name"]
    export = argv(container_of(manifests, "CronJob", "model-export"))
    assert export[export.index("--repository") + 1] == str(settings.repository)
    # Triton here has a GPU: fp16, each encoder in fp32 where it falls below the floor.
    options = export_options(export[export.index("export") + 1 :])
    assert (options["precision"], options["fallback"]) == ("fp16", True)
    triton = container_of(manifests, "Deployment", "triton")
    assert f"--model-repository={settings.repository}" in triton["args"]


def test_pods_run_unprivileged_with_requests_and_memory_limits(manifests: list[Doc]) -> None:
    for doc in manifests:
        template = pod_template(doc)
        if template is None:
            continue
        name = doc["metadata"]["name"]
        assert template["spec"]["securityContext"]["runAsNonRoot"] is True, name
        assert template["spec"]["automountServiceAccountToken"] is False, name
        for container in containers(doc):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["capabilities"]["drop"] == ["ALL"], name
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]), name
            limit = quantity(resources["limits"]["memory"])
            assert quantity(resources["requests"]["memory"]) <= limit, name


def test_triton_runs_the_image_compose_builds_for_the_python_backend(
    manifests: list[Doc],
) -> None:
    """The GPU export runs model/python_backend/model.py (onnxruntime-gpu), as compose's
    `triton` does: the image built from triton-gpu.Dockerfile, never NGC's stock one."""
    service = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["triton"]
    assert service["build"]["dockerfile"] == TRITON_DOCKERFILE
    assert service["image"].split(":", 1)[0] == TRITON_IMAGE
    template = pod_template(one(manifests, "Deployment", "triton"))
    assert template is not None
    (triton,) = template["spec"]["containers"]
    assert triton["image"].rsplit(":", 1)[0] == TRITON_IMAGE
    # The python backend as the local server starts it (its stubs' shared memory) ...
    for flag in python_backend_flags():
        assert flag in triton["args"], flag
    # ... and room for that memory: /dev/shm in RAM, within the container's limit, rather
    # than the runtime's 64 MiB; at least a region each for the two models' stubs.
    [mount] = [m for m in triton["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    shm = volumes[mount["name"]]["emptyDir"]
    assert shm["medium"] == "Memory"
    size = max(int(f.rsplit("=", 1)[1]) for f in python_backend_flags())
    limit = quantity(triton["resources"]["limits"]["memory"])
    assert 2 * size <= quantity(shm["sizeLimit"]) <= limit


def test_beat_runs_once_and_triton_on_a_gpu(manifests: list[Doc]) -> None:
    beat = one(manifests, "Deployment", "beat")["spec"]
    assert beat["replicas"] == 1 and beat["strategy"]["type"] == "Recreate"
    triton = one(manifests, "Deployment", "triton")
    spec = triton["spec"]["template"]["spec"]
    assert spec["nodeSelector"] and spec["tolerations"]
    (container,) = spec["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert {"--model-control-mode=explicit", "--exit-on-error=true"} <= set(container["args"])


def test_queue_redis_is_durable_and_cache_redis_evicts(manifests: list[Doc]) -> None:
    def conf(name: str) -> dict[str, str]:
        statefulset = one(manifests, "StatefulSet", name)
        (container,) = containers(statefulset)
        config = redis_conf(one(manifests, "ConfigMap", name)["data"]["redis.conf"])
        limit = quantity(container["resources"]["limits"]["memory"])
        assert redis_bytes(config["maxmemory"]) < limit, f"{name}: maxmemory above the limit"
        # Its config file is the one the ConfigMap mounts.
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert container["command"][-1] == f"{mounts['config']}/redis.conf"
        assert mounts["data"] == config["dir"]
        return config

    queue = conf("redis-queue")
    assert queue["appendonly"] == "yes" and queue["appendfsync"] == "always"
    assert queue["maxmemory-policy"] == "noeviction"
    # The README tells an operator how often the queue's AOF is fsynced: what the config says.
    readme = " ".join((K8S / "README.md").read_text(encoding="utf-8").split())
    assert f"`appendfsync {queue['appendfsync']}`" in readme
    claims = one(manifests, "StatefulSet", "redis-queue")["spec"]["volumeClaimTemplates"]
    assert [c["metadata"]["name"] for c in claims] == ["data"]
    cache = conf("redis-cache")
    assert cache["save"] == '""' and cache["appendonly"] == "no"
    assert cache["maxmemory-policy"] == "allkeys-lru"


# --- the Prometheus adapter serves what the HPAs ask for ---


def exported_series(metrics: Metrics) -> set[str]:
    suffixes = {"counter": ("_total",), "gauge": ("",), "histogram": ("_count", "_sum", "_bucket")}
    return {f.name + s for f in metrics.registry.collect() for s in suffixes.get(f.type, ())}


def test_adapter_rules_expose_per_pod_metrics_of_real_series() -> None:
    api_series = exported_series(Metrics())
    for rule in adapter_rules():
        match = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)\{", rule["seriesQuery"])
        assert match, rule["seriesQuery"]
        series = match[1]
        assert re.search(rule["name"]["matches"], series), f"{series}: name.matches misses it"
        # The labels the scrape job gives every series, mapped to the pod they came from.
        namespace = relabelled_to("__meta_kubernetes_namespace")
        pod = relabelled_to("__meta_kubernetes_pod_name")
        assert rule["resources"]["overrides"] == {
            namespace: {"resource": "namespace"},
            pod: {"resource": "pod"},
        }
        assert f'{namespace}!=""' in rule["seriesQuery"] and f'{pod}!=""' in rule["seriesQuery"]
        placeholders = set(re.findall(r"<<\.(\w+)>>", rule["metricsQuery"]))
        assert (
            {"LabelMatchers", "GroupBy"} <= placeholders <= {"Series", "LabelMatchers", "GroupBy"}
        )
        if series.startswith("photosearch_"):
            assert series in api_series, f"the API exports no {series}"
    assert load_one(ADAPTER_VALUES)["rules"]["default"] is False


# --- Qdrant ---


def schema_properties(schema: Doc, root: Doc) -> Doc:
    """The properties a (sub)schema allows, through $ref, allOf, anyOf and oneOf."""
    if "$ref" in schema:
        node: Any = root
        for key in schema["$ref"].removeprefix("#/").split("/"):
            node = node[key]
        return schema_properties(node, root)
    found = dict(schema.get("properties", {}))
    for branch in (*schema.get("allOf", []), *schema.get("anyOf", []), *schema.get("oneOf", [])):
        found |= schema_properties(branch, root)
    return found


def unknown_chart_keys(
    values: Doc, defaults: Any, schema: Doc, root: Doc, path: str = ""
) -> Iterator[str]:
    """Keys the chart neither has a default for nor describes in its schema; maps the chart
    leaves free-form (resources, affinity, nodeSelector...) are not descended into."""
    allowed = schema_properties(schema, root)
    for key, value in values.items():
        here = f"{path}{key}"
        default = defaults.get(key) if isinstance(defaults, dict) else None
        if not (isinstance(defaults, dict) and key in defaults) and key not in allowed:
            yield here
            continue
        sub_schema = allowed.get(key, {})
        if isinstance(value, dict) and (default or schema_properties(sub_schema, root)):
            yield from unknown_chart_keys(value, default or {}, sub_schema, root, f"{here}.")


def test_qdrant_values_use_only_keys_of_the_chart() -> None:
    values = load_one(QDRANT_VALUES)
    schema = json.loads((DATA / "qdrant-chart-values.schema.json").read_text())
    jsonschema.Draft7Validator(schema).validate(values)
    defaults = load_one(DATA / "qdrant-chart-values.yaml")
    unknown = list(unknown_chart_keys(values, defaults, schema, schema))
    assert not unknown, f"not keys of the Qdrant chart: {unknown}"
    api_key = values["apiKey"]["valueFrom"]["secretKeyRef"]
    assert api_key["name"] == secret_example()["metadata"]["name"]
    assert api_key["key"] in secret_example()["stringData"]


def test_qdrant_cluster_is_the_one_the_capacity_plan_fits(settings: Settings) -> None:
    values = load_one(QDRANT_VALUES)
    nodes, qdrant = values["replicaCount"], settings.qdrant
    assert nodes == footprint.NODES and qdrant.replicas == 2
    assert qdrant.shards % nodes == 0, "shards spread evenly over the nodes"
    assert qdrant.replicas <= nodes
    # The node the plan counts on: its memory, of which Qdrant's pod gets the limit and the
    # collections the budget; its disk, the volume.
    limit = quantity(values["resources"]["limits"]["memory"])
    assert footprint.NODE_MEMORY_BUDGET_GIB * GiB <= limit <= footprint.NODE_MEMORY_GIB * GiB
    assert quantity(values["persistence"]["size"]) == footprint.NODE_DISK_GIB * GiB
    # The plan is for the collection the pods' settings create.
    layout = footprint.layout_of(qdrant)
    assert layout == footprint.layout_of(QdrantSettings(url="http://qdrant:6333"))
    # The pre-flight check holds a reindex against the same cluster.
    assert qdrant.memory_gib == nodes * footprint.NODE_MEMORY_BUDGET_GIB
    assert qdrant.disk_gib == nodes * footprint.NODE_DISK_SHARE * footprint.NODE_DISK_GIB
    live = footprint.footprint(100_000_000, 512, layout)
    new = footprint.during_build(live, layout)
    assert live.memory_bytes + new.memory_bytes <= qdrant.memory_gib * GiB
    assert live.disk_bytes + new.disk_bytes <= qdrant.disk_gib * GiB
    # The comments name the endpoint where the engine reports its memory per component.
    assert "/telemetry?details_level=" in QDRANT_VALUES.read_text()
