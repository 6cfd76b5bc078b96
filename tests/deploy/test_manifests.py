"""deploy/k8s: every manifest is valid against Kubernetes' own schemas (kubernetes-validate,
offline, strict: unknown fields fail), LeaderWorkerSets against LWS's API, and every tenor
command line in them parses with tenor's own CLI (so no manifest uses a flag that does not
exist). The wiring is checked too: probes hit declared ports, the token file is mounted,
the root points at the etcd Service."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tenor.cli.main import build_parser
from tests.deploy.lws_api import LEADER_WORKER_SET

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
KUBERNETES_VERSION = "1.32.0"
MANIFESTS = sorted(K8S.glob("*.yaml"))


def documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def all_documents() -> list[tuple[str, dict]]:
    return [(p.name, d) for p in MANIFESTS for d in documents(p)]


def pod_templates(doc: dict) -> list[dict]:
    if doc["kind"] == "LeaderWorkerSet":
        lwt = doc["spec"]["leaderWorkerTemplate"]
        return [t for t in (lwt.get("leaderTemplate"), lwt["workerTemplate"]) if t]
    if doc["kind"] in ("Deployment", "StatefulSet"):
        return [doc["spec"]["template"]]
    return []


def tenor_containers(doc: dict) -> list[dict]:
    return [c for t in pod_templates(doc) for c in t["spec"]["containers"] if c["image"].startswith("tenor:")]


def test_every_expected_manifest_is_there() -> None:
    assert {p.name for p in MANIFESTS} == {
        "etcd.yaml",
        "admin.yaml",
        "model-servers.yaml",
        "serve.yaml",
        "disaggregated.yaml",
    }


@pytest.mark.parametrize("name, doc", all_documents(), ids=lambda v: v if isinstance(v, str) else v["kind"])
def test_valid_against_the_schemas(name, doc) -> None:
    if doc["kind"] == "LeaderWorkerSet":
        jsonschema.validate(doc, LEADER_WORKER_SET)
        for i, template in enumerate(pod_templates(doc)):
            wrapped = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"t{i}"}, "template": template}
            kubernetes_validate.validate(wrapped, KUBERNETES_VERSION, strict=True)
    else:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_validators_catch_mistakes() -> None:
    lws = next(d for _, d in all_documents() if d["kind"] == "LeaderWorkerSet")
    bad_policy = yaml.safe_load(yaml.safe_dump(lws))
    bad_policy["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Always"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad_policy, LEADER_WORKER_SET)
    misspelt = yaml.safe_load(yaml.safe_dump(lws))
    misspelt["spec"]["leaderWorkerTemplate"]["sise"] = 2
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(misspelt, LEADER_WORKER_SET)
    deployment = next(d for _, d in all_documents() if d["kind"] == "Deployment")
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(
    "name, doc",
    [(n, d) for n, d in all_documents() if tenor_containers(d)],
    ids=lambda v: v if isinstance(v, str) else v["metadata"]["name"],
)
def test_tenor_command_lines_parse_and_are_wired(name, doc) -> None:
    parser = build_parser()
    for template in pod_templates(doc):
        spec = template["spec"]
        for container in spec["containers"]:
            args = [a.replace("$(POD_IP)", "10.0.0.1") for a in container["args"]]
            parsed = parser.parse_args(args)  # SystemExit on an unknown flag
            ports = {p["containerPort"] for p in container.get("ports", ())}
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                action = container.get(probe, {})
                port = (action.get("httpGet") or action.get("tcpSocket") or {}).get("port")
                assert port is None or port in ports, f"{probe} on undeclared port {port}"
            if getattr(parsed, "token_file", None):
                mounts = {m["mountPath"] for m in container.get("volumeMounts", ())}
                assert str(Path(parsed.token_file).parent) in mounts
                secrets = {v["secret"]["secretName"] for v in spec.get("volumes", ()) if "secret" in v}
                assert secrets == {"tenor-cell-token"}
            if getattr(parsed, "root", None):
                assert parsed.root == "etcd://etcd:2379/tenor"  # etcd.yaml's Service and client port
            if "POD_IP" in " ".join(container["args"]):
                env = {e["name"]: e.get("valueFrom", {}) for e in container.get("env", ())}
                assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}


def test_admins_are_two_on_the_etcd_root() -> None:
    (admin,) = [d for d in documents(K8S / "admin.yaml") if d["kind"] == "Deployment"]
    assert admin["spec"]["replicas"] == 2
    etcd = {d["kind"]: d for d in documents(K8S / "etcd.yaml")}
    assert etcd["StatefulSet"]["spec"]["serviceName"] == etcd["Service"]["metadata"]["name"] == "etcd"
    assert 2379 in {p["port"] for p in etcd["Service"]["spec"]["ports"]}


@pytest.mark.parametrize("file", ["model-servers.yaml", "disaggregated.yaml"])
def test_model_server_groups_are_leader_worker_sets(file) -> None:
    parser = build_parser()
    for lws in documents(K8S / file):
        lwt = lws["spec"]["leaderWorkerTemplate"]
        assert lwt["size"] >= 1 and lwt["restartPolicy"] == "RecreateGroupOnPodRestart"
        (leader,) = lwt["leaderTemplate"]["spec"]["containers"]
        (worker,) = lwt["workerTemplate"]["spec"]["containers"]
        for container in (leader, worker):
            assert container["args"][:2] == ["model-server", "serve"]
            # The group's rank, size and leader come from LWS's env, not from flags here.
            assert not any(a.startswith("--group") for a in container["args"])
        lead = parser.parse_args([a.replace("$(POD_IP)", "10.0.0.1") for a in leader["args"]])
        assert leader["readinessProbe"]["httpGet"] == {"path": "/healthcheck", "port": lead.http_port}
        assert "readinessProbe" not in worker  # only rank 0 serves HTTP


def test_the_disaggregated_sets_are_tagged_prefill_and_decode() -> None:
    tags = set()
    for lws in documents(K8S / "disaggregated.yaml"):
        lwt = lws["spec"]["leaderWorkerTemplate"]
        for template in (lwt["leaderTemplate"], lwt["workerTemplate"]):
            (container,) = template["spec"]["containers"]
            tags |= {a.split("=", 1)[1] for a in container["args"] if a.startswith("--tags=")}
    assert tags == {"prefill", "decode"}
