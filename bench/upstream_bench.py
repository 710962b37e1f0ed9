"""Upstream beside kubus on the same real control plane (issue 22 part 5, issue 25's first goal).

    .venv/bin/python -m bench.upstream_bench                         # 1,000 kwok nodes, both throttle settings
    .venv/bin/python -m bench.upstream_bench --nodes 50              # the quick run
    .venv/bin/python -m bench.upstream_bench --nodes 500 --configs unthrottled --audit-reads

The same work is done twice per configuration, each time on a fresh control plane (controlplane/: etcd,
kube-apiserver v1.36 with an audit log, kube-controller-manager, kube-scheduler, kwok with N nodes):

- upstream: kube-controller-manager runs its own DaemonSet and ReplicaSet controllers, kubus is off;
- kubus: kube-controller-manager runs without them, and `kubus up --kubeconfig` (one process, its embedded
  nats-server, SQLite) is those two controllers.

Each side starts its steps once the node lifecycle controller has taken the new nodes' not-ready taints off (at
kube-controller-manager's 20 QPS, minutes for 1,000 nodes; a DaemonSet pod does not tolerate the taint). The work,
in a namespace `bench`, each step timed until the API shows it done:

1. ds-create: a DaemonSet (RollingUpdate, maxUnavailable 10%) until its status shows N available, N updated
   and the N pods are Running and Ready;
2. ds-update: its image changed, until every pod is of the new revision and available again;
3. rs-up: a ReplicaSet created at 0 replicas (its status observed), then scaled to --replicas (default N),
   until that many are available;
4. rs-down: scaled to 0, until its status says 0 and its pods are gone.

Configurations (--configs): `default`, kube-controller-manager's client defaults for both (kcm
--kube-api-qps 20 --kube-api-burst 30; kubus --qps 20 --burst 30), and `unthrottled` (kcm 10000/10000; kubus
--qps 0, its limiter off). kube-scheduler (50 QPS, burst 100, its defaults) and kwok are the same on both sides.

Printed per step: the time; CPU seconds of each process (utime + stime from /proc/<pid>/stat, before and after
the step); the API writes by user, verb and resource (the audit log; reads only with --audit-reads); the ratio
kubus / upstream. After each step (once the controllers' writes have been quiet for a moment, so late events
are in) what the API shows is snapshotted on both sides: the workload's metadata and status, its pods (per
node, per revision, their shape with names and uids taken out, ownerReferences, managedFields' managers),
events by kind, reason, type and component, ControllerRevisions. Every difference between the two sides is
printed. BENCH_KEEP=1 keeps the work directory (every log, the audit logs).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.loadgen import machine
from controlplane.api import Api, ApiError, wait_for
from controlplane.building import Build, find_or_fail
from controlplane.processes import ControlPlane, ControlPlaneConfig
from executor.correlating import SPAM_REFILL_SECONDS
from runtime.ports import free_port

NAMESPACE = "bench"
DS, RS = "agent", "web"
SIDES = ("upstream", "kubus")
UPSTREAM_USERS = {"system:serviceaccount:kube-system:daemon-set-controller",
                  "system:serviceaccount:kube-system:replicaset-controller"}
ADMIN = "kubus-admin"  # the admin kubeconfig (controlplane/certificates.py): kubus up's, and this benchmark's own
KUBUS_USER, BENCH_USER = "kubus", "bench"  # told apart by their User-Agent ("kubus/..."; Python-urllib's)
# --audit-reads: the groups whose reads are logged too: kubus's (and the bench's, and kwok's), the controllers'
READ_GROUPS = ("system:masters", "system:serviceaccounts:kube-system")
QUIET_S = 3.0  # a step's snapshot waits until the controllers have written nothing for this long
POLL_S = 0.5


# (step, path, upstream's value, kubus's, (each side's seconds from each workload's creation to the snapshot))
Difference = tuple[str, str, Any, Any, tuple[dict[str, float], dict[str, float]]]


@dataclass(frozen=True)
class Throttle:
    name: str
    kcm_qps: float
    kcm_burst: int
    kubus_qps: float
    kubus_burst: int

    def describe(self, side: str) -> str:
        if side == "upstream":
            return f"kube-controller-manager --kube-api-qps {self.kcm_qps:g} --kube-api-burst {self.kcm_burst}"
        return f"kubus up --qps {self.kubus_qps:g} --burst {self.kubus_burst}"


THROTTLES = {"default": Throttle("default", 20, 30, 20, 30),
             "unthrottled": Throttle("unthrottled", 10000, 10000, 0, 30)}
STEPS = ("ds-create", "ds-update", "rs-up", "rs-down")


@dataclass
class Step:
    name: str
    pods: int  # the pods the step creates or deletes (the rolling update: replaces)
    seconds: float
    cpu: dict[str, float]  # process -> CPU seconds during the step
    writes: Counter[tuple[str, str, str]]  # (user, verb, resource[/subresource]) -> requests, during the step
    snapshot: dict[str, Any] = field(default_factory=dict)
    # seconds from each workload's creation to the snapshot (the event spam filter refills with time)
    ages: dict[str, float] = field(default_factory=dict)


@dataclass
class Side:
    side: str
    throttle: Throttle
    steps: list[Step]
    idle_cpu: dict[str, float]  # CPU seconds per second with nothing to do (kwok's heartbeats, leases...)


# --- processes' CPU -----------------------------------------------------------------------------
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (its threads included, its children not), 0 if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": state is fields[0]
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def descendants(pid: int) -> Iterator[tuple[int, str]]:
    """Every process under ``pid`` (its embedded nats-server), with its command name."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return
    for task in tasks:
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            try:
                name = Path(f"/proc/{child}/comm").read_text().strip()
            except OSError:
                continue
            yield child, name
            yield from descendants(child)


class Meter:
    """The processes measured: the control plane's, and kubus's (kubus up and what it started)."""

    def __init__(self, plane: ControlPlane, kubus: subprocess.Popen[bytes] | None) -> None:
        self.plane, self.kubus = plane, kubus

    def sample(self) -> dict[str, float]:
        out = {p.name: cpu_seconds(p.pid) for p in self.plane.processes if p.pid is not None}
        if self.kubus is not None:
            out["kubus"] = cpu_seconds(self.kubus.pid)
            for child, name in descendants(self.kubus.pid):
                key = f"kubus/{name}"
                out[key] = out.get(key, 0.0) + cpu_seconds(child)
        return out


def difference(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before.get(name, 0.0) for name in after}


# --- the audit log ------------------------------------------------------------------------------
class Audit:
    """Reads the audit log from where it last stopped: the entries of one step."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0
        self.last_write: dict[str, float] = {}  # user -> when (monotonic) we last saw them write

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1  # a line being written stays for the next read
        self.offset += end
        entries = [json.loads(line) for line in data[:end].splitlines() if line.strip()]
        now = time.monotonic()
        for entry in entries:
            if entry.get("stage") == "ResponseComplete" and entry["verb"] not in ("get", "list", "watch"):
                self.last_write[who(entry)] = now
        return entries

    def quiet(self, users: set[str], seconds: float) -> bool:
        self.read()
        latest = max((self.last_write.get(u, 0.0) for u in users), default=0.0)
        return time.monotonic() - latest >= seconds


def who(entry: dict[str, Any]) -> str:
    """The user of an audit entry; the admin's requests split into kubus's and this benchmark's."""
    user = str(entry["user"]["username"])
    if user == ADMIN:
        return KUBUS_USER if str(entry.get("userAgent", "")).startswith("kubus/") else BENCH_USER
    return user


def requests(entries: list[dict[str, Any]]) -> Counter[tuple[str, str, str]]:
    counts: Counter[tuple[str, str, str]] = Counter()
    for entry in entries:
        if entry.get("stage") != "ResponseComplete":
            continue
        ref = entry.get("objectRef") or {}
        resource = ref.get("resource", entry.get("requestURI", "?").split("?")[0])
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        counts[(who(entry), entry["verb"], resource)] += 1
    return counts


# --- kubus up -----------------------------------------------------------------------------------
def start_kubus(workdir: Path, kubeconfig: Path, throttle: Throttle) -> tuple[subprocess.Popen[bytes], Path]:
    port, log = free_port(), workdir / "kubus-up.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kubus", "up", "--kubeconfig", str(kubeconfig), "--data-dir",
             str(workdir / "kubus-data"), "--metrics-port", str(port), "--qps", f"{throttle.kubus_qps:g}",
             "--burst", str(throttle.kubus_burst)], stdout=out, stderr=subprocess.STDOUT)

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"kubus up exited with {proc.returncode}; its log is {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    try:
        wait_for(ready, 120, "kubus up to be ready (/readyz)", interval=0.2)
    except BaseException:
        stop_kubus(proc)
        raise
    return proc, log


def stop_kubus(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- the work -----------------------------------------------------------------------------------
def pod_template(image: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"labels": labels},
            "spec": {"containers": [{"name": "main", "image": image}],
                     # kwok's nodes carry no taint; the pods still go through kube-scheduler
                     "terminationGracePeriodSeconds": 30}}


def daemonset_body() -> dict[str, Any]:
    labels = {"app": DS}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": DS, "namespace": NAMESPACE},
            "spec": {"selector": {"matchLabels": labels}, "template": pod_template("registry.k8s.io/agent:1", labels),
                     "updateStrategy": {"type": "RollingUpdate",
                                        "rollingUpdate": {"maxUnavailable": "10%", "maxSurge": 0}}}}


def replicaset_body() -> dict[str, Any]:
    labels = {"app": RS}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": RS, "namespace": NAMESPACE},
            "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                     "template": pod_template("registry.k8s.io/pause:3.10", labels)}}


DS_PATH = f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/{DS}"
RS_PATH = f"/apis/apps/v1/namespaces/{NAMESPACE}/replicasets/{RS}"


def tainted(api: Api) -> list[str]:
    """The nodes carrying a taint (a new node's not-ready, a NotReady node's), which a pod may not tolerate."""
    return [n["metadata"]["name"] for n in api.get("/api/v1/nodes")["items"] if (n.get("spec") or {}).get("taints")]


def list_pods(api: Api, app: str) -> list[dict[str, Any]]:
    return list(api.get(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=app%3D{app}")["items"])


def available(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    return (status.get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")
            and any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []))


def daemonset_done(api: Api, nodes: int) -> Callable[[], bool]:
    def done() -> bool:
        ds = api.get(DS_PATH)
        status = ds.get("status") or {}
        if not (status.get("observedGeneration") == ds["metadata"]["generation"]
                and status.get("desiredNumberScheduled") == nodes == status.get("currentNumberScheduled")
                and status.get("updatedNumberScheduled") == nodes == status.get("numberAvailable")
                and not status.get("numberUnavailable") and not status.get("numberMisscheduled")):
            return False
        revisions = api.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/controllerrevisions")["items"]
        current = max((r for r in revisions if r["metadata"]["name"].startswith(DS + "-")),
                      key=lambda r: r["revision"], default=None)
        if current is None:
            return False
        hash_ = current["metadata"]["labels"].get("controller-revision-hash")
        pods = list_pods(api, DS)
        return (len(pods) == nodes and all(available(p) for p in pods)
                and all(p["metadata"]["labels"].get("controller-revision-hash") == hash_ for p in pods)
                and len({p["spec"].get("nodeName") for p in pods}) == nodes)
    return done


def replicaset_done(api: Api, replicas: int) -> Callable[[], bool]:
    def done() -> bool:
        rs = api.get(RS_PATH)
        status = rs.get("status") or {}
        if not (status.get("observedGeneration") == rs["metadata"]["generation"]
                and status.get("replicas", 0) == replicas == status.get("availableReplicas", 0)
                and status.get("readyReplicas", 0) == replicas == status.get("fullyLabeledReplicas", 0)):
            return False
        pods = list_pods(api, RS)
        return len(pods) == replicas and all(available(p) for p in pods)
    return done


def scale(api: Api, replicas: int) -> None:
    api.request("PATCH", RS_PATH + "/scale", {"spec": {"replicas": replicas}},
                content_type="application/merge-patch+json")


# --- what the API shows -------------------------------------------------------------------------
TIMES = {"creationTimestamp", "lastTransitionTime", "lastUpdateTime", "startedAt", "startTime", "time",
         "firstTimestamp", "lastTimestamp", "eventTime", "lastHeartbeatTime", "deletionTimestamp", "lastProbeTime"}
RANDOM = re.compile(r"\b(agent|web|kube-api-access)-[a-z0-9]{5}\b")
# kubus.io/idempotency-key's decision id (its sequence and clock) and a ReplicaSet create's index
KEY = re.compile(r"@\d+~\d+/(create/(?:\d+$)?)")
NODE = re.compile(r"\bkwok-node-\d+\b")
HASH = re.compile(r"\b[0-9a-z]{8,10}\b")  # a ControllerRevision's hash, replaced by "<hash of revision N>"


def scrub(value: Any, uids: dict[str, str]) -> Any:
    """Names, uids, times and node names taken out, so that two runs' objects compare."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in TIMES or key in ("resourceVersion", "managedFields", "podIP", "podIPs", "hostIP", "hostIPs"):
                continue
            if key == "uid":
                out[key] = uids.get(item, "<uid>")
            else:
                out[key] = scrub(item, uids)
        return out
    if isinstance(value, list):
        return [scrub(item, uids) for item in value]
    if isinstance(value, str):
        if value in uids:
            return uids[value]
        value = NODE.sub("<node>", RANDOM.sub(r"\1-<random>", KEY.sub(_key, value)))
        return HASH.sub(lambda m: uids.get(m.group(0), m.group(0)), value)
    return value


def _key(match: re.Match[str]) -> str:
    return "@<seq>~<clock>/" + ("create/<i>" if match.group(1) not in ("", "create/") else match.group(1))


def managers(obj: dict[str, Any]) -> list[str]:
    return sorted({f"{m.get('manager')} {m.get('operation')} {m.get('subresource', '')}".strip()
                   for m in obj["metadata"].get("managedFields") or []})


def snapshot(api: Api, nodes: int) -> dict[str, Any]:
    ds = _get_or_none(api, DS_PATH)
    rs = _get_or_none(api, RS_PATH)
    uids = {o["metadata"]["uid"]: f"<uid of {o['kind']}>" for o in (ds, rs) if o}
    revisions = api.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/controllerrevisions")["items"]
    # the hashes differ by design (docs/daemonset.md, "The revision hash"): compared by revision number
    for r in revisions:
        hash_ = (r["metadata"].get("labels") or {}).get("controller-revision-hash")
        if hash_:
            uids[hash_] = f"<hash of revision {r['revision']}>"
    out: dict[str, Any] = {}
    for kind, obj, app in (("DaemonSet", ds, DS), ("ReplicaSet", rs, RS)):
        if obj is None:
            continue
        meta = obj["metadata"]
        out[kind] = {"generation": meta.get("generation"), "labels": meta.get("labels"),
                     "annotations": meta.get("annotations"), "finalizers": meta.get("finalizers"),
                     "managers": managers(obj), "status": scrub(obj.get("status"), uids)}
        pods = list_pods(api, app)
        per_node = Counter(p["spec"].get("nodeName") for p in pods)
        shapes: Counter[str] = Counter()
        for pod in pods:
            shape = scrub({"metadata": {k: v for k, v in pod["metadata"].items() if k not in ("name",)},
                           "spec": pod["spec"], "status": {"phase": (pod.get("status") or {}).get("phase")}}, uids)
            shape["metadata"]["managers"] = managers(pod)
            shapes[json.dumps(shape, sort_keys=True)] += 1
        out[kind + " pods"] = {
            "count": len(pods),
            "nodes with k pods": {str(k): n for k, n in sorted(Counter(per_node.values()).items())},
            "unscheduled": per_node.get(None, 0),
            "per revision": dict(Counter(scrub(p["metadata"]["labels"].get("controller-revision-hash", ""), uids)
                                         for p in pods)),
            "shapes": len(shapes),
            "shape": json.loads(shapes.most_common(1)[0][0]) if shapes else None,
        }
        if kind == "DaemonSet" and pods:
            out[kind + " pods"]["nodes covered"] = f"{len(set(per_node) - {None})} of {nodes}"
    events: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for event in api.get(f"/api/v1/namespaces/{NAMESPACE}/events")["items"]:
        source = (event.get("source") or {}).get("component") or event.get("reportingComponent") or ""
        key = f"{event['involvedObject'].get('kind')} {event.get('type')} {event.get('reason')} ({source})"
        events[key] += 1
        counts[key] += event.get("count") or 1
    out["events (objects)"] = dict(events)
    out["events (sum of count)"] = dict(counts)
    out["ControllerRevisions"] = {
        f"revision {r['revision']}": {"name": scrub(r["metadata"]["name"], uids),
                                      "labels": scrub(r["metadata"].get("labels"), uids),
                                "ownerReferences": scrub(r["metadata"].get("ownerReferences"), uids),
                                "managers": managers(r), "data": r.get("data")}
        for r in revisions}
    return out


def _get_or_none(api: Api, path: str) -> dict[str, Any] | None:
    try:
        result: dict[str, Any] = api.get(path)
        return result
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list) and value and any(isinstance(v, dict | list) for v in value):
        out = {}
        for i, item in enumerate(value):
            out.update(flatten(item, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


def differences(upstream: dict[str, Any], kubus: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    a, b = flatten(upstream), flatten(kubus)
    missing = object()
    return [(path, a.get(path, missing), b.get(path, missing)) for path in sorted(set(a) | set(b))
            if a.get(path, missing) != b.get(path, missing)]


def _managers_but_the_name(path: str, upstream: Any, kubus: Any) -> bool:
    return (path.endswith("managers") and isinstance(upstream, list) and isinstance(kubus, list)
            and sorted(m.replace("kube-controller-manager ", "kubus ") for m in upstream) == kubus)


# the differences that are by design, each with where it is said; any other is listed as unexplained
EXPLAINED: list[tuple[Callable[[str, Any, Any], bool], str]] = [
    (_managers_but_the_name,
     "the field manager is the writer's User-Agent: kubus's writes are kubus's (runtime/kubeconfig.py, user_agent)"),
    (lambda path, upstream, kubus: path.endswith(".annotations.kubus.io/idempotency-key") and type(upstream) is object,
     "kubus's create key on each pod (docs/daemonset.md, 'The kubus.io/idempotency-key annotation')"),
]


def explain(path: str, upstream: Any, kubus: Any, ages: tuple[dict[str, float], dict[str, float]] = ({}, {})
            ) -> str | None:
    """Why the two sides differ at ``path``, if by design; ``ages``: each side's seconds from each workload's
    creation to the snapshot."""
    if path.startswith("ReplicaSet pods.nodes with k pods."):
        return "where the ReplicaSet's pods go is kube-scheduler's choice (equal scores, ties broken at random)"
    kind = path.split(".", 1)[-1].split(" ", 1)[0] if path.startswith("events ") else ""
    if kind in ages[0] and kind in ages[1]:
        tokens = [int(side[kind] // SPAM_REFILL_SECONDS) for side in ages]
        if tokens[0] != tokens[1]:
            return (f"the event spam filter (client-go's EventSourceObjectSpamFilter, executor/correlating.py: 25 "
                    f"events per object, then one per {SPAM_REFILL_SECONDS:.0f} s): {ages[0][kind]:.0f} s after the "
                    f"{kind}'s creation upstream, {ages[1][kind]:.0f} s for kubus, so {tokens[0]} and {tokens[1]} "
                    "refilled tokens")
    return next((why for test, why in EXPLAINED if test(path, upstream, kubus)), None)


def _same(a: tuple[Any, Any], b: tuple[Any, Any]) -> bool:
    """Equal values (an absent one, a fresh ``object()`` each time, equals any absent one)."""
    return all((type(x) is object and type(y) is object) or x == y for x, y in zip(a, b, strict=True))


def _shown(value: Any) -> str:
    return "(absent)" if type(value) is object else json.dumps(value)


# --- one side -----------------------------------------------------------------------------------
def run_side(build: Build, side: str, throttle: Throttle, nodes: int, replicas: int, workdir: Path,
             timeout: float, audit_reads: bool, say: Callable[[str], None]) -> Side:
    upstream = side == "upstream"
    config = ControlPlaneConfig(nodes=nodes, data_dir=workdir / "controlplane", upstream_controllers=upstream,
                                controller_manager_qps=throttle.kcm_qps, controller_manager_burst=throttle.kcm_burst,
                                audit_reads_of=READ_GROUPS if audit_reads else (),
                                start_timeout=max(120.0, nodes * 0.3))
    started = time.monotonic()
    plane = ControlPlane(build, config)
    plane.start()
    kubus: subprocess.Popen[bytes] | None = None
    try:
        api = plane.api()
        say(f"  {side}: control plane with {nodes} nodes up in {time.monotonic() - started:.1f} s "
            f"({throttle.describe(side)})")
        # kube-apiserver's TaintNodesByCondition admission gives every new node node.kubernetes.io/not-ready:NoSchedule,
        # which the node lifecycle controller takes off once it sees the node Ready, at its client's rate (20 QPS
        # by default: ~150 s for 1,000 nodes). A DaemonSet pod does not tolerate it: start once it is gone.
        settled = time.monotonic()
        wait_for(lambda: not tainted(api), max(120.0, nodes * 0.6),
                 "the node lifecycle controller to untaint the nodes", interval=1.0, check=plane._check_all)
        say(f"  {side}: the nodes' not-ready taints gone {time.monotonic() - settled:.1f} s later")
        if not upstream:
            kubus, _ = start_kubus(workdir, plane.kubeconfig, throttle)
        users = UPSTREAM_USERS if upstream else {KUBUS_USER}
        meter, audit = Meter(plane, kubus), Audit(plane.audit_log)
        api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        wait_for(lambda: _get_or_none(api, f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"), 60,
                 f"the default ServiceAccount of {NAMESPACE}")
        # the background: what every process spends with nothing to do (kwok's heartbeats and leases...)
        before, t0 = meter.sample(), time.monotonic()
        wait_for(lambda: time.monotonic() - t0 >= 5.0 or None, 10, "the idle measurement", interval=0.5)
        idle = {k: v / (time.monotonic() - t0) for k, v in difference(meter.sample(), before).items()}
        audit.read()

        steps: list[Step] = []

        def step(name: str, pods: int, act: Callable[[], None], done: Callable[[], bool], what: str) -> None:
            cpu0, t = meter.sample(), time.monotonic()
            act()
            wait_for(done, timeout, f"{side}/{throttle.name}: {what}", interval=POLL_S, check=plane._check_all)
            seconds = time.monotonic() - t
            cpu = difference(meter.sample(), cpu0)
            writes = requests(audit.read())
            # let late writes (events, a last status update) land before looking
            wait_for(lambda: audit.quiet(users, QUIET_S), 120, f"{side}: the controllers' writes to stop",
                     interval=0.5)
            shown, now = snapshot(api, nodes), time.monotonic()
            steps.append(Step(name, pods, seconds, cpu, writes + requests(audit.read()), shown,
                              {kind: now - at for kind, at in created.items()}))
            say(f"  {side}: {name} {seconds:.1f} s")
            if kubus is not None and kubus.poll() is not None:
                raise RuntimeError(f"kubus up exited with {kubus.returncode} during {name}")

        ds_done = daemonset_done(api, nodes)
        created: dict[str, float] = {}

        def create_daemonset() -> None:
            created["DaemonSet"] = time.monotonic()
            api.post(f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets", daemonset_body())

        step("ds-create", nodes, create_daemonset,
             ds_done, f"the DaemonSet available on {nodes} nodes")
        step("ds-update", nodes, lambda: api.request(
            "PATCH", DS_PATH, {"spec": {"template": {"spec": {"containers": [
                {"name": "main", "image": "registry.k8s.io/agent:2"}]}}}},
            content_type="application/strategic-merge-patch+json"), ds_done, "the rolling update")

        def create_replicaset() -> None:
            created["ReplicaSet"] = time.monotonic()
            api.post(f"/apis/apps/v1/namespaces/{NAMESPACE}/replicasets", replicaset_body())
            wait_for(replicaset_done(api, 0), timeout, "the ReplicaSet's status at 0", interval=POLL_S)
            scale(api, replicas)

        step("rs-up", replicas, create_replicaset, replicaset_done(api, replicas), f"{replicas} replicas available")
        step("rs-down", replicas, lambda: scale(api, 0), replicaset_done(api, 0), "0 replicas, the pods gone")
        return Side(side, throttle, steps, idle)
    finally:
        if kubus is not None:
            stop_kubus(kubus)
            if kubus.returncode != 0:
                say(f"  kubus up exited with {kubus.returncode}; its log is {workdir / 'kubus-up.log'}")
        plane.stop()


# --- the report ---------------------------------------------------------------------------------
def _controller_writes(side: Side, step: Step) -> int:
    users = UPSTREAM_USERS if side.side == "upstream" else {KUBUS_USER}
    return sum(n for (user, _, _), n in step.writes.items() if user in users)


def _ratio(a: float, b: float) -> str:
    return f"{b / a:.2f}" if a else "-"


def _short(user: str) -> str:
    return user.replace("system:serviceaccount:kube-system:", "sa:").replace("system:", "")


def report(upstream: Side, kubus: Side, say: Callable[[str], None]) -> list[Difference]:
    """Print the figures of one configuration and every difference; return the differences."""
    found: list[Difference] = []
    first_seen: dict[str, tuple[Any, Any, tuple[dict[str, float], dict[str, float]]]] = {}
    say(f"\n=== {upstream.throttle.name}: {upstream.throttle.describe('upstream')} vs "
        f"{kubus.throttle.describe('kubus')}")
    say("idle CPU (s/s): " + " | ".join(
        f"{s.side}: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(s.idle_cpu.items())) for s in (upstream, kubus)))
    for a, b in zip(upstream.steps, kubus.steps, strict=True):
        say(f"\n-- {a.name}: time upstream {a.seconds:.1f} s, kubus {b.seconds:.1f} s, "
            f"ratio kubus/upstream {_ratio(a.seconds, b.seconds)}")
        names = sorted(set(a.cpu) | set(b.cpu))
        say("   CPU s      " + "".join(f"{n[:16]:>17}" for n in names) + f"{'total':>10}")
        for s in (a, b):
            side = "upstream" if s is a else "kubus"
            say(f"   {side:<10} " + "".join(f"{s.cpu.get(n, 0.0):>17.2f}" for n in names)
                + f"{sum(s.cpu.values()):>10.2f}")
        ctl_a = a.cpu.get("kube-controller-manager", 0.0)
        ctl_b = b.cpu.get("kube-controller-manager", 0.0) + sum(v for k, v in b.cpu.items() if k.startswith("kubus"))
        say(f"   CPU ms per pod ({a.pods} pods): controllers {1000 * ctl_a / a.pods:.2f} vs {1000 * ctl_b / b.pods:.2f}"
            f" (kubus alone {1000 * (ctl_b - b.cpu.get('kube-controller-manager', 0.0)) / b.pods:.2f}); every "
            f"process {1000 * sum(a.cpu.values()) / a.pods:.2f} vs {1000 * sum(b.cpu.values()) / b.pods:.2f}")
        say(f"   controllers' CPU (kcm; kcm + kubus): {ctl_a:.2f} vs {ctl_b:.2f}, ratio {_ratio(ctl_a, ctl_b)}; "
            f"kube-apiserver {_ratio(a.cpu.get('kube-apiserver', 0), b.cpu.get('kube-apiserver', 0))}, "
            f"etcd {_ratio(a.cpu.get('etcd', 0), b.cpu.get('etcd', 0))}, "
            f"total {_ratio(sum(a.cpu.values()), sum(b.cpu.values()))}")
        wa, wb = _controller_writes(upstream, a), _controller_writes(kubus, b)
        say(f"   the controllers' API requests (audit log): upstream {wa}, kubus {wb}, ratio {_ratio(wa, wb)}")
        for s, of in ((a, upstream), (b, kubus)):
            rows: dict[str, Counter[str]] = {}
            for (user, verb, resource), n in s.writes.items():
                rows.setdefault(_short(user), Counter())[f"{verb} {resource}"] += n
            for user in sorted(rows, key=lambda u: -sum(rows[u].values())):
                say(f"     {of.side:<8} {user}: " + ", ".join(f"{k} {n}" for k, n in sorted(rows[user].items())))
        diff = differences(a.snapshot, b.snapshot)
        say(f"   what the API shows after {a.name}: {len(diff)} difference(s)" + (":" if diff else ""))
        for path, x, y in diff:
            # a difference unchanged since an earlier step is judged as it was then (the spam filter's refill
            # counts from the workload's creation; a token refilled later, that no event took, changes nothing)
            seen = first_seen.get(path)
            ages = seen[2] if seen is not None and _same(seen[:2], (x, y)) else (a.ages, b.ages)
            first_seen.setdefault(path, (x, y, ages))
            if seen is not None and not _same(seen[:2], (x, y)):
                first_seen[path] = (x, y, ages)
            why = explain(path, x, y, ages)
            say(f"     {path}: upstream {_shown(x)} | kubus {_shown(y)}" + (f"  [{why}]" if why else "  [UNEXPLAINED]"))
            found.append((a.name, path, x, y, ages))
    return found


# issue 25's goals: at equal client settings kubus within 10% of upstream's time; unthrottled, at least half its speed
GOALS = {"default": 1.10, "unthrottled": 2.0}  # the most kubus's total time may be, in upstream's


def _load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def summary(results: dict[str, tuple[Side, Side, list[Difference]]],
            say: Callable[[str], None]) -> None:
    say("\n=== summary (times in s; ratio kubus/upstream, above 1 kubus is slower)")
    say(f"   {'configuration':<13} " + "".join(f"{s:>20}" for s in (*STEPS, "total")) + "   goal")
    for name, (upstream, kubus, _) in results.items():
        cells = [f"{a.seconds:.1f}/{b.seconds:.1f} ({_ratio(a.seconds, b.seconds)})"
                 for a, b in zip(upstream.steps, kubus.steps, strict=True)]
        ta, tb = sum(s.seconds for s in upstream.steps), sum(s.seconds for s in kubus.steps)
        cells.append(f"{ta:.1f}/{tb:.1f} ({_ratio(ta, tb)})")
        goal = GOALS.get(name)
        verdict = "" if goal is None else f"kubus/upstream <= {goal:.2f}: {'met' if tb <= goal * ta else 'NOT met'}"
        say(f"   {name:<13} " + "".join(f"{c:>20}" for c in cells) + f"   {verdict}")
    for name, (upstream, kubus, found) in results.items():
        pods = sum(s.pods for s in upstream.steps)
        kcm = sum(s.cpu.get("kube-controller-manager", 0.0) for s in upstream.steps)
        ours = sum(v for s in kubus.steps for k, v in s.cpu.items() if k.startswith("kubus"))
        say(f"   {name}: CPU ms per pod over the {pods} pods of the 4 steps: kube-controller-manager (upstream) "
            f"{1000 * kcm / pods:.2f}, kubus (with its nats-server) {1000 * ours / pods:.2f}; every process "
            f"{1000 * sum(sum(s.cpu.values()) for s in upstream.steps) / pods:.2f} vs "
            f"{1000 * sum(sum(s.cpu.values()) for s in kubus.steps) / pods:.2f}")
        unexplained = [(step, path, x, y) for step, path, x, y, ages in found if explain(path, x, y, ages) is None]
        say(f"   {name}: {len(found)} difference(s) in what the API shows, {len(unexplained)} unexplained"
            + (":" if unexplained else ""))
        for step, path, x, y in unexplained:
            say(f"     after {step}: {path}: upstream {_shown(x)} | kubus {_shown(y)}")


def run(nodes: int, replicas: int, configs: list[str], timeout: float, audit_reads: bool = False,
        say: Callable[[str], None] = print) -> dict[str, tuple[Side, Side, list[Difference]]]:
    build = find_or_fail()
    say(f"machine: {machine()}; {build.describe()}")
    say(f"{nodes} kwok nodes, ReplicaSet 0 -> {replicas} -> 0; configurations: {', '.join(configs)}; {_load()}")
    keep = bool(os.environ.get("BENCH_KEEP"))
    root = Path(tempfile.mkdtemp(prefix="kubus-upstream-bench-"))
    results = {}
    try:
        for name in configs:
            throttle = THROTTLES[name]
            sides = {side: run_side(build, side, throttle, nodes, replicas, root / f"{name}-{side}", timeout,
                                    audit_reads, say) for side in SIDES}
            found = report(sides["upstream"], sides["kubus"], say)
            results[name] = (sides["upstream"], sides["kubus"], found)
        summary(results, say)
        say(f"at the end: {_load()}")
    finally:
        if keep:
            say(f"work directory kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.upstream_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000, help="kwok nodes (default 1000)")
    parser.add_argument("--replicas", type=int, help="the ReplicaSet's replicas at its peak (default: --nodes)")
    parser.add_argument("--configs", default="default,unthrottled",
                        help=f"comma-separated, of {', '.join(THROTTLES)} (default: both)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds each step may take (default 1800)")
    parser.add_argument("--audit-reads", action="store_true", help="also log the reads (get, list, watch)")
    args = parser.parse_args(argv)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in configs if c not in THROTTLES]
    if unknown or not configs:
        parser.error(f"--configs: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(THROTTLES)}")
    if args.nodes < 1:
        parser.error(f"--nodes must be 1 or more, not {args.nodes}")
    replicas = args.nodes if args.replicas is None else args.replicas
    if replicas < 1:
        parser.error(f"--replicas must be 1 or more, not {replicas}")
    run(args.nodes, replicas, configs, args.timeout, args.audit_reads)


if __name__ == "__main__":
    main()
