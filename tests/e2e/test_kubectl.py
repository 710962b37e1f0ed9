"""`kubus sim` driven by the real kubectl binary: what a user typing kubectl commands sees."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from tests.simulation import Kubectl, LineReader, SimProcess, table_rows, wait_for

pytestmark = pytest.mark.kubectl

NODES = ["node-0", "node-1", "node-2", "node-3"]


# --- manifests --------------------------------------------------------------------------------------
def pod(name: str, namespace: str, *, labels: dict[str, str] | None = None, image: str = "nginx:1.27",
        annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "main", "image": image}], **spec}}


def template(labels: dict[str, str], containers: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    containers = containers or [("main", "nginx:1.27")]
    return {"metadata": {"labels": labels},
            "spec": {"containers": [{"name": n, "image": i} for n, i in containers]}}


def replicaset(name: str, namespace: str, replicas: int = 2, *, labels: dict[str, str] | None = None,
               containers: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    selector = {"app": name}
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta,
            "spec": {"replicas": replicas, "selector": {"matchLabels": selector},
                     "template": template(selector, containers)}}


def daemonset(name: str, namespace: str, *, template_labels: dict[str, str] | None = None) -> dict[str, Any]:
    selector = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": selector},
                     "template": template(template_labels or selector)}}


def owned_pod(name: str, namespace: str, owner: dict[str, Any]) -> dict[str, Any]:
    body = pod(name, namespace, labels={"app": owner["metadata"]["name"]})
    body["metadata"]["ownerReferences"] = [{
        "apiVersion": "apps/v1", "kind": owner["kind"], "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    return body


def manifest(*objects: dict[str, Any]) -> str:
    """Objects for `kubectl create -f -`, as JSON: kubectl reads YAML 1.1, where a bare `y` is a bool."""
    if len(objects) == 1:
        return json.dumps(objects[0])
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})


# --- helpers -------------------------------------------------------------------------------------------
def get(kubectl: Kubectl, *args: str) -> Any:
    return kubectl.json("get", *args)


def exists(kubectl: Kubectl, *args: str) -> bool:
    result = kubectl("get", *args, "-o", "name", "--ignore-not-found", check=True)
    return bool(result.stdout.strip())


def names(kubectl: Kubectl, *args: str) -> set[str]:
    out = kubectl("get", *args, "-o", "name").stdout
    return {line.split("/", 1)[1] for line in out.split()}


def running(kubectl: Kubectl, namespace: str, name: str) -> dict[str, str] | None:
    rows = table_rows(kubectl("get", "pod", name, "-n", namespace).stdout)
    return rows[0] if rows and rows[0]["STATUS"] == "Running" and rows[0]["READY"] == "1/1" else None


@pytest.fixture
def node_restored(sim: SimProcess) -> Iterator[Callable[[str], None]]:
    """Registers nodes a test changes; their spec is restored afterwards."""
    saved: dict[str, Any] = {}

    def register(name: str) -> None:
        code, node = sim.request("GET", f"/api/v1/nodes/{name}")
        assert code == 200, node
        saved[name] = node["spec"]

    yield register
    for name, spec in saved.items():
        patch = {"spec": {"taints": spec.get("taints"), "unschedulable": spec.get("unschedulable")}}
        code, body = sim.request("PATCH", f"/api/v1/nodes/{name}", patch, "application/merge-patch+json")
        assert code == 200, body


# --- reading the cluster ---------------------------------------------------------------------------------
def test_get_nodes_lists_ready_nodes(kubectl: Kubectl) -> None:
    """`kubectl get nodes` shows every simulated node with STATUS Ready."""
    rows = table_rows(kubectl("get", "nodes").stdout)
    assert [r["NAME"] for r in rows] == NODES
    assert {r["STATUS"] for r in rows} == {"Ready"}
    assert all(r["VERSION"] == "v1.32.0-kubus-sim" for r in rows)


def test_api_resources_lists_the_seven_kinds(kubectl: Kubectl) -> None:
    """`kubectl api-resources` lists exactly the kinds the sim serves, with their short names."""
    out = kubectl("api-resources").stdout
    rows = {r["NAME"]: r for r in table_rows(out)}
    assert set(rows) == {"namespaces", "nodes", "pods", "events", "daemonsets", "replicasets",
                         "controllerrevisions"}
    assert {r["KIND"] for r in rows.values()} == {"Namespace", "Node", "Pod", "Event", "DaemonSet",
                                                  "ReplicaSet", "ControllerRevision"}
    assert rows["daemonsets"]["SHORTNAMES"] == "ds"
    assert rows["daemonsets"]["APIVERSION"] == "apps/v1"
    assert rows["pods"]["NAMESPACED"] == "true"
    assert rows["nodes"]["NAMESPACED"] == "false"


def test_created_pod_becomes_running_and_ready(kubectl: Kubectl, namespace: str) -> None:
    """A pod created with `kubectl create -f` is scheduled and becomes Running with 1/1 ready."""
    out = kubectl("create", "-f", "-", input=manifest(pod("web", namespace))).stdout
    assert out.strip() == "pod/web created"
    wait_for(lambda: running(kubectl, namespace, "web"), what="pod web Running 1/1")
    obj = get(kubectl, "pod", "web", "-n", namespace)
    assert obj["spec"]["nodeName"] in NODES
    conditions = {c["type"]: c["status"] for c in obj["status"]["conditions"]}
    assert conditions["Ready"] == "True"
    assert conditions["PodScheduled"] == "True"
    wide = table_rows(kubectl("get", "pod", "web", "-n", namespace, "-o", "wide").stdout)[0]
    assert wide["NODE"] == obj["spec"]["nodeName"]
    assert wide["IP"] == obj["status"]["podIP"]


@pytest.mark.parametrize("fmt, load", [pytest.param("json", json.loads, id="json"),
                                       pytest.param("yaml", yaml.safe_load, id="yaml")])
def test_get_output_formats(kubectl: Kubectl, namespace: str, fmt: str, load: Callable[[str], Any]) -> None:
    """`kubectl get -o json|yaml` prints the full object with server-set metadata."""
    kubectl("create", "-f", "-", input=manifest(pod("p", namespace, labels={"app": "x"})))
    obj = load(kubectl("get", "pod", "p", "-n", namespace, "-o", fmt).stdout)
    assert obj["kind"] == "Pod"
    assert obj["apiVersion"] == "v1"
    assert obj["metadata"]["name"] == "p"
    assert obj["metadata"]["namespace"] == namespace
    assert obj["metadata"]["labels"] == {"app": "x"}
    assert len(obj["metadata"]["uid"]) == 36
    assert int(obj["metadata"]["resourceVersion"]) > 0
    assert obj["metadata"]["creationTimestamp"].endswith("Z")
    assert obj["spec"]["containers"][0]["image"] == "nginx:1.27"
    listed = load(kubectl("get", "pods", "-n", namespace, "-o", fmt).stdout)
    assert listed["kind"] == "List"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["p"]


@pytest.mark.parametrize("args, expected", [
    pytest.param(["--field-selector", "spec.nodeName=node-0"], {"a", "c"}, id="field-node"),
    pytest.param(["--field-selector", "spec.nodeName=node-0,metadata.name!=a"], {"c"}, id="field-two-terms"),
    pytest.param(["-l", "app=x"], {"a"}, id="label-equals"),
    pytest.param(["-l", "app in (x,y)"], {"a", "b", "c"}, id="label-in"),
    pytest.param(["-l", "app!=x"], {"b", "c"}, id="label-not"),
    pytest.param(["-l", "app=y", "--field-selector", "spec.nodeName=node-1"], {"b"}, id="label-and-field"),
])
def test_get_pods_with_selectors(kubectl: Kubectl, namespace: str, args: list[str], expected: set[str]) -> None:
    """`kubectl get pods` with --field-selector and -l returns exactly the matching pods."""
    kubectl("create", "-f", "-", input=manifest(
        pod("a", namespace, labels={"app": "x"}, nodeName="node-0"),
        pod("b", namespace, labels={"app": "y"}, nodeName="node-1"),
        pod("c", namespace, labels={"app": "y"}, nodeName="node-0")))
    assert names(kubectl, "pods", "-n", namespace, *args) == expected


def _ago(minutes: int, micro: bool = False) -> str:
    then = datetime.now(UTC) - timedelta(minutes=minutes)
    return then.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("timing, source", [
    pytest.param(lambda: {"firstTimestamp": _ago(90), "lastTimestamp": _ago(90), "count": 3,
                          "source": {"component": "e2e", "host": "node-0"}}, "e2e, node-0", id="legacy-timestamps"),
    pytest.param(lambda: {"eventTime": _ago(90, micro=True), "action": "Testing", "reportingComponent": "e2e",
                          "reportingInstance": "node-1"}, "e2e, node-1", id="event-time"),
])
def test_get_events(kubectl: Kubectl, namespace: str, timing: Callable[[], dict[str, Any]], source: str) -> None:
    """`kubectl get events` shows type, reason, object, message and age, from either API's timestamps."""
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "web.17a", "namespace": namespace},
             "involvedObject": {"kind": "Pod", "name": "web", "namespace": namespace, "apiVersion": "v1"},
             "reason": "Testing", "message": "hello from the e2e test", "type": "Warning", **timing()}
    kubectl("create", "-f", "-", input=manifest(event))
    rows = table_rows(kubectl("get", "events", "-n", namespace).stdout)
    assert len(rows) == 1
    row = rows[0]
    assert (row["TYPE"], row["REASON"], row["OBJECT"], row["MESSAGE"]) == \
        ("Warning", "Testing", "pod/web", "hello from the e2e test")
    assert row["LAST SEEN"] in ("90m", "91m")
    wide = table_rows(kubectl("get", "events", "-n", namespace, "-o", "wide").stdout)[0]
    assert wide["SOURCE"] == source
    assert wide["FIRST SEEN"] in ("90m", "91m")
    assert wide["COUNT"] == str(event.get("count", 1))


# --- writing ---------------------------------------------------------------------------------------------
def test_apply_creates_then_configures(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl apply` creates, then a changed manifest is `configured` (image changed), then `unchanged`."""
    first = kubectl("apply", "-f", "-", input=manifest(pod("web", namespace, image="nginx:1.27"))).stdout
    assert first.strip() == "pod/web created"
    changed = manifest(pod("web", namespace, image="nginx:1.28"))
    assert kubectl("apply", "-f", "-", input=changed).stdout.strip() == "pod/web configured"
    obj = get(kubectl, "pod", "web", "-n", namespace)
    assert [c["image"] for c in obj["spec"]["containers"]] == ["nginx:1.28"]
    applied = json.loads(obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert applied["spec"]["containers"][0]["image"] == "nginx:1.28"
    assert kubectl("apply", "-f", "-", input=changed).stdout.strip() == "pod/web unchanged"


@pytest.mark.parametrize("kind, obj, columns", [
    pytest.param("rs", replicaset("front", "NS", 3),
                 {"NAME": "front", "DESIRED": "3", "CURRENT": "0", "READY": "0"}, id="replicaset"),
    pytest.param("ds", daemonset("agent", "NS"),
                 {"NAME": "agent", "DESIRED": "0", "CURRENT": "0", "READY": "0", "UP-TO-DATE": "0",
                  "AVAILABLE": "0", "NODE SELECTOR": "<none>"}, id="daemonset"),
])
def test_apply_workload_and_get_columns(kubectl: Kubectl, namespace: str, kind: str, obj: dict[str, Any],
                                        columns: dict[str, str]) -> None:
    """A ReplicaSet or DaemonSet applied with kubectl shows kube-apiserver's `get` columns."""
    obj = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
    out = kubectl("apply", "-f", "-", input=manifest(obj)).stdout.strip()
    assert out == f"{obj['kind'].lower()}.apps/{obj['metadata']['name']} created"
    rows = table_rows(kubectl("get", kind, "-n", namespace).stdout)
    assert len(rows) == 1
    assert list(rows[0])[-1] == "AGE"
    assert {k: rows[0][k] for k in columns} == columns
    wide = table_rows(kubectl("get", kind, "-n", namespace, "-o", "wide").stdout)[0]
    assert wide["CONTAINERS"] == "main"
    assert wide["IMAGES"] == "nginx:1.27"
    assert wide["SELECTOR"] == f"app={obj['metadata']['name']}"


def test_replace(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl replace -f` writes the whole new object: labels and replicas change."""
    kubectl("create", "-f", "-", input=manifest(replicaset("r", namespace, 2)))
    before = get(kubectl, "rs", "r", "-n", namespace)
    out = kubectl("replace", "-f", "-", input=manifest(replicaset("r", namespace, 5, labels={"tier": "web"})))
    assert out.stdout.strip() == "replicaset.apps/r replaced"
    after = get(kubectl, "rs", "r", "-n", namespace)
    assert after["metadata"]["labels"] == {"tier": "web"}
    assert after["spec"]["replicas"] == 5
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert int(after["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])
    assert after["metadata"]["generation"] == 2


def _containers(obj: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["name"], c["image"]) for c in obj["spec"]["template"]["spec"]["containers"]]


@pytest.mark.parametrize("ptype, patch, check", [
    pytest.param("merge", {"metadata": {"labels": {"tier": "web"}}},
                 lambda o: o["metadata"]["labels"] == {"tier": "web", "team": "a"}, id="merge-labels"),
    pytest.param("merge", {"metadata": {"labels": {"team": None}}},
                 lambda o: "labels" not in o["metadata"] or o["metadata"]["labels"] == {}, id="merge-null-removes"),
    pytest.param("json", [{"op": "replace", "path": "/spec/replicas", "value": 4}],
                 lambda o: o["spec"]["replicas"] == 4, id="json-replace"),
    pytest.param("json", [{"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}}],
                 lambda o: o["metadata"]["annotations"] == {"k": "v"}, id="json-add"),
    pytest.param(None, {"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "busybox:2"}]}}}},
                 lambda o: _containers(o) == [("a", "busybox:1"), ("b", "busybox:2")],
                 id="strategic-merges-by-name"),
    pytest.param("merge", {"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "busybox:2"}]}}}},
                 lambda o: _containers(o) == [("b", "busybox:2")], id="merge-replaces-list"),
])
def test_patch(kubectl: Kubectl, namespace: str, ptype: str | None, patch: Any,
               check: Callable[[dict[str, Any]], bool]) -> None:
    """`kubectl patch` with --type merge, json and the default strategic merge."""
    rs = replicaset("r", namespace, 2, labels={"team": "a"}, containers=[("a", "busybox:1"), ("b", "busybox:1")])
    kubectl("create", "-f", "-", input=manifest(rs))
    args = ["patch", "rs", "r", "-n", namespace, "-p", json.dumps(patch)]
    if ptype:
        args += ["--type", ptype]
    assert kubectl(*args).stdout.strip() == "replicaset.apps/r patched"
    obj = get(kubectl, "rs", "r", "-n", namespace)
    assert check(obj), obj


def test_label_and_annotate(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl label` adds and (`a-`) removes labels; `kubectl annotate` sets annotations."""
    kubectl("create", "-f", "-", input=manifest(pod("p", namespace, labels={"app": "web"})))
    assert kubectl("label", "pod", "p", "-n", namespace, "a=b").stdout.strip() == "pod/p labeled"
    assert get(kubectl, "pod", "p", "-n", namespace)["metadata"]["labels"] == {"app": "web", "a": "b"}
    assert names(kubectl, "pods", "-n", namespace, "-l", "a=b") == {"p"}
    refused = kubectl("label", "pod", "p", "-n", namespace, "a=c", check=False)
    assert refused.returncode != 0 and "--overwrite" in refused.stderr
    kubectl("label", "pod", "p", "-n", namespace, "a=c", "--overwrite")
    assert get(kubectl, "pod", "p", "-n", namespace)["metadata"]["labels"]["a"] == "c"
    assert kubectl("label", "pod", "p", "-n", namespace, "a-").stdout.strip() == "pod/p unlabeled"
    assert get(kubectl, "pod", "p", "-n", namespace)["metadata"]["labels"] == {"app": "web"}
    out = kubectl("annotate", "pod", "p", "-n", namespace, "note=hello world", "team=a").stdout
    assert out.strip() == "pod/p annotated"
    annotations = get(kubectl, "pod", "p", "-n", namespace)["metadata"]["annotations"]
    assert annotations == {"note": "hello world", "team": "a"}
    kubectl("annotate", "pod", "p", "-n", namespace, "team-")
    assert get(kubectl, "pod", "p", "-n", namespace)["metadata"]["annotations"] == {"note": "hello world"}


def test_scale_replicaset(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl scale rs/NAME --replicas=N` changes spec.replicas, shown as DESIRED."""
    kubectl("create", "-f", "-", input=manifest(replicaset("r", namespace, 2)))
    out = kubectl("scale", "rs/r", "-n", namespace, "--replicas=7").stdout
    assert out.strip() == "replicaset.apps/r scaled"
    obj = get(kubectl, "rs", "r", "-n", namespace)
    assert obj["spec"]["replicas"] == 7
    assert obj["metadata"]["generation"] == 2
    assert table_rows(kubectl("get", "rs", "r", "-n", namespace).stdout)[0]["DESIRED"] == "7"
    stale = kubectl("scale", "rs/r", "-n", namespace, "--replicas=1", "--current-replicas=3", check=False)
    assert stale.returncode != 0
    assert get(kubectl, "rs", "r", "-n", namespace)["spec"]["replicas"] == 7


# --- nodes ------------------------------------------------------------------------------------------------
def test_taint_and_untaint_node(kubectl: Kubectl, node_restored: Callable[[str], None]) -> None:
    """`kubectl taint nodes n k=v:NoSchedule` adds the taint and `k-` removes it."""
    node_restored("node-3")
    assert kubectl("taint", "nodes", "node-3", "e2e=yes:NoSchedule").stdout.strip() == "node/node-3 tainted"
    taints = get(kubectl, "node", "node-3")["spec"]["taints"]
    assert taints == [{"key": "e2e", "value": "yes", "effect": "NoSchedule"}]
    duplicate = kubectl("taint", "nodes", "node-3", "e2e=no:NoSchedule", check=False)
    assert duplicate.returncode != 0
    assert kubectl("taint", "nodes", "node-3", "e2e-").stdout.strip() == "node/node-3 untainted"
    assert not get(kubectl, "node", "node-3")["spec"].get("taints")


def _scheduled_condition(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any] | None:
    obj = get(kubectl, "pod", name, "-n", namespace)
    return next((c for c in obj["status"].get("conditions", []) if c["type"] == "PodScheduled"), None)


def test_cordon_and_uncordon(kubectl: Kubectl, namespace: str, node_restored: Callable[[str], None]) -> None:
    """A cordoned node shows SchedulingDisabled and gets no pods until it is uncordoned."""
    node_restored("node-1")
    assert kubectl("cordon", "node-1").stdout.strip() == "node/node-1 cordoned"
    rows = {r["NAME"]: r["STATUS"] for r in table_rows(kubectl("get", "nodes").stdout)}
    assert rows["node-1"] == "Ready,SchedulingDisabled"
    assert rows["node-0"] == "Ready"
    pinned = pod("pinned", namespace, nodeSelector={"kubernetes.io/hostname": "node-1"})
    free = [pod(f"free-{i}", namespace) for i in range(6)]
    kubectl("create", "-f", "-", input=manifest(pinned, *free))
    cond = wait_for(lambda: (c := _scheduled_condition(kubectl, namespace, "pinned")) and c["status"] == "False"
                    and c, what="pinned pod marked unschedulable")
    assert cond["reason"] == "Unschedulable"
    assert "unschedulable" in cond["message"]

    def bound() -> dict[str, str | None] | None:
        items = get(kubectl, "pods", "-n", namespace)["items"]
        placed = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in items}
        return placed if all(n for name, n in placed.items() if name != "pinned") else None

    nodes = wait_for(bound, what="free pods bound")
    assert nodes.pop("pinned") is None
    assert "node-1" not in nodes.values()
    assert kubectl("uncordon", "node-1").stdout.strip() == "node/node-1 uncordoned"
    assert table_rows(kubectl("get", "node", "node-1").stdout)[0]["STATUS"] == "Ready"
    wait_for(lambda: get(kubectl, "pod", "pinned", "-n", namespace)["spec"].get("nodeName") == "node-1",
             what="pinned pod scheduled after uncordon")


def test_drain_node(kubectl: Kubectl, namespace: str, node_restored: Callable[[str], None]) -> None:
    """`kubectl drain` cordons a node and deletes its pods, leaving DaemonSet pods with --ignore-daemonsets."""
    node_restored("node-2")
    kubectl("create", "-f", "-", input=manifest(daemonset("agent", namespace)))
    ds = get(kubectl, "ds", "agent", "-n", namespace)
    daemon = owned_pod("agent-x", namespace, ds)
    daemon["spec"]["nodeName"] = "node-2"
    kubectl("create", "-f", "-", input=manifest(daemon, pod("plain", namespace, nodeName="node-2"),
                                                pod("elsewhere", namespace, nodeName="node-0")))
    wait_for(lambda: running(kubectl, namespace, "plain"), what="pod Running")
    out = kubectl("drain", "node-2", "--force", "--ignore-daemonsets", "--timeout=20s").stdout
    assert "node/node-2 cordoned" in out and "node/node-2 drained" in out
    assert names(kubectl, "pods", "-n", namespace) == {"agent-x", "elsewhere"}
    assert get(kubectl, "node", "node-2")["spec"]["unschedulable"] is True


# --- deleting ---------------------------------------------------------------------------------------------
def test_graceful_delete_shows_terminating(kubectl: Kubectl, namespace: str) -> None:
    """A graceful delete leaves the pod Terminating for its grace period, then it disappears."""
    slow = pod("slow", namespace, annotations={"sim.kubus.io/termination-seconds": "1"})
    kubectl("create", "-f", "-", input=manifest(slow))
    wait_for(lambda: running(kubectl, namespace, "slow"), what="pod Running")
    assert kubectl("delete", "pod", "slow", "-n", namespace, "--wait=false").stdout.strip() == 'pod "slow" deleted'
    row = table_rows(kubectl("get", "pod", "slow", "-n", namespace).stdout)[0]
    assert row["STATUS"] == "Terminating"
    obj = get(kubectl, "pod", "slow", "-n", namespace)
    assert obj["metadata"]["deletionGracePeriodSeconds"] == 30
    wait_for(lambda: not exists(kubectl, "pod", "slow", "-n", namespace), what="pod gone")


def test_force_delete_removes_at_once(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl delete --grace-period=0 --force` removes a running pod immediately."""
    kubectl("create", "-f", "-", input=manifest(pod("p", namespace, annotations={
        "sim.kubus.io/termination-seconds": "30"})))
    wait_for(lambda: running(kubectl, namespace, "p"), what="pod Running")
    result = kubectl("delete", "pod", "p", "-n", namespace, "--grace-period=0", "--force", "--wait=false")
    assert result.stdout.strip() == 'pod "p" force deleted'
    assert not exists(kubectl, "pod", "p", "-n", namespace)
    missing = kubectl("get", "pod", "p", "-n", namespace, check=False)
    assert missing.returncode != 0
    assert 'pods "p" not found' in missing.stderr


@pytest.mark.parametrize("cascade, survive", [
    pytest.param("orphan", True, id="orphan"),
    pytest.param("background", False, id="background"),
    pytest.param("foreground", False, id="foreground"),
])
def test_delete_replicaset_cascade(kubectl: Kubectl, namespace: str, cascade: str, survive: bool) -> None:
    """`kubectl delete rs --cascade=orphan` keeps pods (without ownerReferences); otherwise they go too."""
    kubectl("create", "-f", "-", input=manifest(replicaset("r", namespace, 2)))
    rs = get(kubectl, "rs", "r", "-n", namespace)
    kubectl("create", "-f", "-", input=manifest(owned_pod("r-1", namespace, rs), owned_pod("r-2", namespace, rs)))
    kubectl("create", "-f", "-", input=manifest(pod("bystander", namespace, labels={"app": "r"})))
    kubectl("delete", "rs", "r", "-n", namespace, f"--cascade={cascade}", "--timeout=20s")
    assert not exists(kubectl, "rs", "r", "-n", namespace)
    if survive:
        pods = get(kubectl, "pods", "-n", namespace)["items"]
        assert {p["metadata"]["name"] for p in pods} == {"r-1", "r-2", "bystander"}
        assert all("ownerReferences" not in p["metadata"] for p in pods)
        assert all("deletionTimestamp" not in p["metadata"] for p in pods)
    else:
        wait_for(lambda: names(kubectl, "pods", "-n", namespace) == {"bystander"}, what="owned pods deleted")


def test_namespace_delete_removes_its_pods(kubectl: Kubectl) -> None:
    """Deleting a namespace deletes the pods in it, then the namespace itself."""
    assert kubectl("create", "namespace", "e2e-doomed").stdout.strip() == "namespace/e2e-doomed created"
    kubectl("create", "-f", "-", input=manifest(pod("a", "e2e-doomed"), pod("b", "e2e-doomed")))
    wait_for(lambda: running(kubectl, "e2e-doomed", "a"), what="pod a Running")
    assert kubectl("delete", "namespace", "e2e-doomed", "--timeout=20s").stdout.strip() == \
        'namespace "e2e-doomed" deleted'
    assert not exists(kubectl, "namespace", "e2e-doomed")
    assert names(kubectl, "pods", "-n", "e2e-doomed") == set()
    refused = kubectl("create", "-f", "-", input=manifest(pod("c", "e2e-doomed")), check=False)
    assert refused.returncode != 0 and 'namespaces "e2e-doomed" not found' in refused.stderr


# --- watching ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("flags, added, deleted", [
    pytest.param([], lambda line: "Pending" in line, lambda line: "Terminating" in line, id="plain"),
    pytest.param(["--output-watch-events"], lambda line: line.startswith("ADDED"),
                 lambda line: line.startswith("DELETED"), id="watch-events"),
])
def test_get_pods_watch_streams_changes(kubectl: Kubectl, namespace: str, flags: list[str],
                                        added: Callable[[str], bool], deleted: Callable[[str], bool]) -> None:
    """`kubectl get pods -w` prints a line for each change of a pod created and deleted meanwhile."""
    kubectl("create", "-f", "-", input=manifest(pod("before", namespace)))
    proc = kubectl.popen("get", "pods", "-n", namespace, "-w", *flags)
    try:
        lines = LineReader(proc.stdout)
        lines.expect(lambda line: "NAME" in line and "STATUS" in line, what="the header")
        lines.expect(lambda line: "before" in line, what="the existing pod")
        kubectl("create", "-f", "-", input=manifest(pod("watched", namespace)))
        lines.expect(lambda line: "watched" in line and added(line), what="the new pod")
        lines.expect(lambda line: "watched" in line and "Running" in line, what="the new pod running")
        kubectl("delete", "pod", "watched", "-n", namespace, "--wait=false")
        lines.expect(lambda line: "watched" in line and deleted(line), what="the deletion")
        assert all("before" in line or "watched" in line or "NAME" in line for line in lines.lines)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        stderr = proc.stderr.read()
        proc.stderr.close()
    assert "error" not in stderr.lower(), stderr


# --- bad input --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("document, messages", [
    pytest.param(manifest(daemonset("bad", "NS", template_labels={"app": "other"})),
                 'The DaemonSet "bad" is invalid: spec.template.metadata.labels: Invalid value: '
                 'map[string]string{"app":"other"}: `selector` does not match template `labels`',
                 id="daemonset-selector-mismatch"),
    pytest.param(manifest(pod("a" * 254, "NS")), ['The Pod "aaaa', 'is invalid: metadata.name: Invalid value: "aaaa',
                                                  "must be no more than 253"], id="name-too-long"),
    pytest.param(manifest(pod("Upper", "NS")), 'The Pod "Upper" is invalid: metadata.name: Invalid value: "Upper"',
                 id="name-uppercase"),
    pytest.param(manifest({**pod("nocontainers", "NS"), "spec": {"containers": []}}),
                 'The Pod "nocontainers" is invalid: spec.containers: Required value', id="no-containers"),
    pytest.param(manifest(replicaset("neg", "NS", -1)), 'The ReplicaSet "neg" is invalid: spec.replicas: '
                 "Invalid value: -1: must be greater than or equal to 0", id="negative-replicas"),
    pytest.param("apiVersion: v1\nkind: Pod\nmetadata: {name: [\n", "yaml", id="malformed-yaml"),
    pytest.param('{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"', "unexpected eof", id="malformed-json"),
])
def test_bad_manifests_are_rejected(kubectl: Kubectl, namespace: str, document: str,
                                    messages: str | list[str]) -> None:
    """Invalid or malformed manifests are refused with an error naming what is wrong; nothing is created."""
    result = kubectl("create", "-f", "-", input=document.replace('"NS"', f'"{namespace}"'),
                     check=False)
    assert result.returncode != 0
    for message in [messages] if isinstance(messages, str) else messages:
        assert message.lower() in result.stderr.lower(), result.stderr
    assert names(kubectl, "pods,rs,ds", "-n", namespace) == set()


def test_unknown_field_is_refused_strictly_and_dropped_otherwise(kubectl: Kubectl, namespace: str) -> None:
    """kubectl asks for strict field validation, so a typo fails; with --validate=false it is dropped."""
    body = pod("typo", namespace)
    body["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    document = manifest(body)
    refused = kubectl("create", "-f", "-", input=document, check=False)
    assert refused.returncode != 0
    assert 'Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field ' \
           '"spec.containers[0].imagePullPolicyy"' in refused.stderr, refused.stderr
    kubectl("create", "-f", "-", "--validate=false", input=document)
    stored = kubectl.json("get", "pod", "typo", "-n", namespace)
    assert "imagePullPolicyy" not in stored["spec"]["containers"][0]


def test_invalid_label_selector_is_an_error(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl get pods -l 'a in (b'` fails with a parse error instead of listing anything."""
    result = kubectl("get", "pods", "-n", namespace, "-l", "a in (b", check=False)
    assert result.returncode != 0
    assert result.stderr.startswith("Error from server (BadRequest):"), result.stderr
    assert result.stderr.rstrip().endswith(": unable to parse requirement: found '', expected: ',' or ')'"), \
        result.stderr
    assert result.stderr.count("unable to parse requirement") == 1


@pytest.mark.parametrize("args, message", [
    pytest.param(["get", "pod", "missing"], 'Error from server (NotFound): pods "missing" not found', id="get-missing"),
    pytest.param(["delete", "rs", "missing"], 'Error from server (NotFound): replicasets.apps "missing" not found',
                 id="delete-missing"),
    pytest.param(["create", "-f", "-"], 'Error from server (AlreadyExists): error when creating "STDIN": '
                 'pods "taken" already exists', id="create-duplicate"),
    pytest.param(["get", "pods", "--field-selector", "spec.image=x"],
                 'field label not supported: spec.image', id="unsupported-field-selector"),
])
def test_server_errors_are_reported(kubectl: Kubectl, namespace: str, args: list[str], message: str) -> None:
    """kubectl shows the server's Status for missing objects, duplicates and unsupported selectors."""
    kubectl("create", "-f", "-", input=manifest(pod("taken", namespace)))
    result = kubectl(*args, "-n", namespace, input=manifest(pod("taken", namespace)), check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


# --- server-side dry run -----------------------------------------------------------------------------------
def _state(kubectl: Kubectl, namespace: str) -> dict[str, Any]:
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in get(kubectl, "pods,rs", "-n", namespace)["items"]}


@pytest.mark.parametrize("args, stdin, expected", [
    pytest.param(["create", "-f", "-"], lambda ns: manifest(pod("new", ns)), "pod/new created (server dry run)",
                 id="create"),
    pytest.param(["apply", "-f", "-"], lambda ns: manifest(pod("live", ns, image="nginx:9")),
                 "pod/live configured (server dry run)", id="apply"),
    pytest.param(["replace", "-f", "-"], lambda ns: manifest(replicaset("r", ns, 9)),
                 "replicaset.apps/r replaced (server dry run)", id="replace"),
    pytest.param(["label", "pod", "live", "x=y"], None, "pod/live labeled (server dry run)", id="label"),
    pytest.param(["patch", "rs", "r", "--type", "merge", "-p", '{"spec":{"replicas":9}}'], None,
                 "replicaset.apps/r patched", id="patch"),  # kubectl patch does not say it was a dry run
    pytest.param(["scale", "rs/r", "--replicas=9"], None, "replicaset.apps/r scaled (server dry run)", id="scale"),
    pytest.param(["delete", "pod", "live"], None, 'pod "live" deleted (server dry run)', id="delete-pod"),
    pytest.param(["delete", "rs", "r"], None, 'replicaset.apps "r" deleted (server dry run)', id="delete-rs"),
])
def test_server_dry_run_changes_nothing(kubectl: Kubectl, namespace: str, args: list[str],
                                        stdin: Callable[[str], str] | None, expected: str) -> None:
    """`--dry-run=server` answers as if the change were made but leaves every object as it was."""
    kubectl("create", "-f", "-", input=manifest(pod("live", namespace), replicaset("r", namespace, 2)))
    wait_for(lambda: running(kubectl, namespace, "live"), what="pod Running")
    before = _state(kubectl, namespace)
    result = kubectl(*args, "-n", namespace, "--dry-run=server", input=stdin(namespace) if stdin else None)
    assert result.stdout.strip() == expected
    assert _state(kubectl, namespace) == before


def test_diff_shows_the_change_without_making_it(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl diff` (a server-side dry run) shows the image change and leaves the live object alone."""
    kubectl("apply", "-f", "-", input=manifest(replicaset("r", namespace, 2)))
    before = get(kubectl, "rs", "r", "-n", namespace)
    changed = replicaset("r", namespace, 2, containers=[("main", "nginx:9.9")])
    result = kubectl("diff", "-f", "-", input=manifest(changed), check=False)
    assert result.returncode == 1, result.stderr  # 1: differences found
    changes = [line for line in result.stdout.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert "-      - image: nginx:1.27" in changes and "+      - image: nginx:9.9" in changes, result.stdout
    assert "+  generation: 2" in changes
    assert get(kubectl, "rs", "r", "-n", namespace) == before
    same = kubectl("diff", "-f", "-", input=manifest(replicaset("r", namespace, 2)), check=False)
    assert (same.returncode, same.stdout) == (0, "")


# --- more of kubectl's everyday commands ---------------------------------------------------------------------
def test_create_namespace_command(kubectl: Kubectl) -> None:
    """`kubectl create namespace` (which sends protobuf) creates an Active namespace with the name label."""
    out = kubectl("create", "namespace", "e2e-typed").stdout.strip()
    try:
        assert out == "namespace/e2e-typed created"
        ns = get(kubectl, "namespace", "e2e-typed")
        assert ns["status"]["phase"] == "Active"
        assert ns["metadata"]["labels"] == {"kubernetes.io/metadata.name": "e2e-typed"}
        again = kubectl("create", "namespace", "e2e-typed", check=False)
        assert 'namespaces "e2e-typed" already exists' in again.stderr
    finally:
        kubectl("delete", "namespace", "e2e-typed", "--wait=false")


def test_get_in_chunks_and_across_namespaces(kubectl: Kubectl, namespace: str) -> None:
    """`--chunk-size` pages through server-side tables; `-A` adds the NAMESPACE column."""
    kubectl("create", "-f", "-", input=manifest(*(pod(f"p{i}", namespace) for i in range(5))))
    rows = table_rows(kubectl("get", "pods", "-n", namespace, "--chunk-size=2").stdout)
    assert [r["NAME"] for r in rows] == [f"p{i}" for i in range(5)]
    everywhere = table_rows(kubectl("get", "pods", "-A", "--chunk-size=3").stdout)
    assert [r["NAME"] for r in everywhere if r["NAMESPACE"] == namespace] == [f"p{i}" for i in range(5)]
    assert list(everywhere[0])[:2] == ["NAMESPACE", "NAME"]


def test_wait_for_ready_and_for_delete(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl wait` sees a pod become Ready, and then see it deleted."""
    kubectl("create", "-f", "-", input=manifest(pod("w", namespace)))
    ready = kubectl("wait", "-n", namespace, "--for=condition=Ready", "pod/w", "--timeout=15s")
    assert ready.stdout.strip() == "pod/w condition met"
    kubectl("delete", "pod", "w", "-n", namespace, "--wait=false")
    gone = kubectl("wait", "-n", namespace, "--for=delete", "pod/w", "--timeout=15s", check=False)
    assert gone.returncode == 0, gone.stderr


@pytest.mark.parametrize("what, expected", [
    pytest.param(["pod", "d"], ["Status:           Running", "Node:             node-", "Ready             True"],
                 id="pod"),
    pytest.param(["rs", "r"], ["Replicas:     0 current / 2 desired", "Selector:     app=r"], id="replicaset"),
    pytest.param(["node", "node-0"], ["Ready            True", "Non-terminated Pods:"], id="node"),
])
def test_describe(kubectl: Kubectl, namespace: str, what: list[str], expected: list[str]) -> None:
    """`kubectl describe` (which reads the object, its pods and its events) works for pods, ReplicaSets, nodes."""
    kubectl("create", "-f", "-", input=manifest(pod("d", namespace), replicaset("r", namespace, 2)))
    wait_for(lambda: running(kubectl, namespace, "d"), what="pod Running")
    out = kubectl("describe", *what, "-n", namespace).stdout
    for line in expected:
        assert line in out, out
