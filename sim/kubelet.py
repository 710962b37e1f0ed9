"""Simulated kubelets: run bound pods, fail them on request, finish graceful deletions.

One object plays every node's kubelet. A pod bound to a node becomes Running and Ready after
`start_delay` seconds, with the conditions, IPs and container statuses a real kubelet reports.
Pods opt into failure modes through annotations (usually set on a controller's pod template):

- `sim.kubus.io/fail-after-seconds: "N"`: the pod fails (phase Failed, exit code 1) N seconds
  after it started running.
- `sim.kubus.io/succeed-after-seconds: "N"`: the pod completes (phase Succeeded) after N seconds.
- `sim.kubus.io/never-ready: "true"`: the pod runs but never passes its readiness probe.

A node labelled `sim.kubus.io/kubelet=off`, or every node when the sim runs with `--no-kubelet`,
has no kubelet: pods there keep whatever status clients write through `/status`, and graceful
deletions there are only finished by a delete with gracePeriodSeconds=0, as on a node whose
kubelet is gone.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from typing import Any

from sim import resources as R
from sim import status as errors
from sim.registry import Registry, format_time
from sim.store import DELETED, HistoryEvent

log = logging.getLogger("kubus.sim.kubelet")

ANNOTATION_FAIL_AFTER = "sim.kubus.io/fail-after-seconds"
ANNOTATION_SUCCEED_AFTER = "sim.kubus.io/succeed-after-seconds"
ANNOTATION_NEVER_READY = "sim.kubus.io/never-ready"
ANNOTATION_TERMINATION = "sim.kubus.io/termination-seconds"
LABEL_KUBELET = "sim.kubus.io/kubelet"


def _seconds(annotations: dict[str, str], key: str) -> float | None:
    try:
        return float(annotations[key]) if key in annotations else None
    except ValueError:
        return None


class Kubelets:
    def __init__(self, registry: Registry, *, start_delay: float = 0.5, termination_seconds: float = 1.0,
                 enabled: bool = True):
        self.registry = registry
        self.store = registry.store
        self.start_delay = start_delay
        self.termination_seconds = termination_seconds
        self.enabled = enabled
        self._timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ips: dict[str, int] = {}
        self.store.add_listener(self._observe)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        for entry in list(self.store.iter(R.PODS)):  # pods that existed before the kubelets started
            self._consider(entry.obj)

    def manages(self, node_name: str) -> bool:
        if not self.enabled or not node_name:
            return False
        node = self.store.get(R.NODES, "", node_name)
        if node is None:
            return False
        return (node.obj["metadata"].get("labels") or {}).get(LABEL_KUBELET) != "off"

    # --- reacting to pod changes ---------------------------------------------------------------
    def _observe(self, event: HistoryEvent) -> None:
        if event.resource is not R.PODS or self._loop is None:
            return
        key = (event.namespace, event.name)
        if event.type == DELETED:
            timer = self._timers.pop(key, None)
            if timer:
                timer.cancel()
            return
        self._consider(event.entry.obj)

    def _consider(self, pod: dict[str, Any]) -> None:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        node = spec.get("nodeName")
        if not node or not self.manages(node):
            return
        key = (meta["namespace"], meta["name"])
        annotations = meta.get("annotations") or {}
        if meta.get("deletionTimestamp"):
            grace = meta.get("deletionGracePeriodSeconds") or 0
            custom = _seconds(annotations, ANNOTATION_TERMINATION)
            delay = custom if custom is not None else min(float(grace), self.termination_seconds)
            self._arm(key, delay, self._finish_deletion, meta.get("uid"), replace=True)
            return
        phase = status.get("phase")
        if phase == "Pending" and not status.get("containerStatuses"):
            self._arm(key, self.start_delay, self._start, meta.get("uid"))
        elif phase == "Running":
            for annotation, final in ((ANNOTATION_FAIL_AFTER, "Failed"), (ANNOTATION_SUCCEED_AFTER, "Succeeded")):
                after = _seconds(annotations, annotation)
                if after is not None:
                    self._arm(key, after, self._terminate, meta.get("uid"), final)
                    break

    def _arm(self, key: tuple[str, str], delay: float, action: Any, *args: Any, replace: bool = False) -> None:
        if key in self._timers:
            if not replace:
                return
            self._timers[key].cancel()
        assert self._loop is not None
        self._timers[key] = self._loop.call_later(max(delay, 0.0), self._fire, key, action, args)

    def _fire(self, key: tuple[str, str], action: Any, args: tuple[Any, ...]) -> None:
        self._timers.pop(key, None)
        entry = self.store.get(R.PODS, *key)
        if entry is None or entry.obj["metadata"].get("uid") != args[0]:
            return
        try:
            action(entry.obj, *args[1:])
        except errors.ApiError as exc:
            log.debug("kubelet update of %s/%s failed: %s", key[0], key[1], exc.message)

    # --- pod lifecycle -----------------------------------------------------------------------
    def _start(self, pod: dict[str, Any]) -> None:
        now = format_time(self.registry.clock())
        annotations = pod["metadata"].get("annotations") or {}
        ready = annotations.get(ANNOTATION_NEVER_READY) != "true"
        ready_text = "True" if ready else "False"
        node = pod["spec"]["nodeName"]
        host_ip = self._host_ip(node)
        pod_ip = self._pod_ip(node)
        status = dict(pod.get("status") or {})
        scheduled = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"),
                         {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                          "lastTransitionTime": now})
        status.update({
            "phase": "Running",
            "conditions": [
                _condition("PodReadyToStartContainers", "True", now),
                _condition("Initialized", "True", now),
                _condition("Ready", ready_text, now),
                _condition("ContainersReady", ready_text, now),
                scheduled,
            ],
            "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
            "podIP": pod_ip, "podIPs": [{"ip": pod_ip}],
            "startTime": now,
            "containerStatuses": [
                {"name": c["name"], "state": {"running": {"startedAt": now}}, "lastState": {},
                 "ready": ready, "restartCount": 0, "image": c.get("image", ""),
                 "imageID": _image_id(c.get("image", "")), "containerID": _container_id(pod, c["name"]),
                 "started": True}
                for c in pod["spec"].get("containers") or []
            ],
        })
        if not ready:
            for cond in status["conditions"][2:4]:
                cond["reason"] = "ContainersNotReady"
        self._write_status(pod, status)

    def _terminate(self, pod: dict[str, Any], phase: str) -> None:
        now = format_time(self.registry.clock())
        code = 1 if phase == "Failed" else 0
        reason = "Error" if code else "Completed"
        status = dict(pod.get("status") or {})
        status["phase"] = phase
        status["conditions"] = [
            _condition(c["type"], "False", now, "PodCompleted" if code == 0 else "PodFailed")
            if c["type"] in ("Ready", "ContainersReady", "PodReadyToStartContainers") else c
            for c in status.get("conditions") or []
        ]
        statuses = []
        for cs in status.get("containerStatuses") or []:
            started = (cs.get("state") or {}).get("running", {}).get("startedAt", now)
            statuses.append({**cs, "ready": False, "started": False,
                             "state": {"terminated": {"exitCode": code, "reason": reason, "startedAt": started,
                                                      "finishedAt": now,
                                                      "containerID": cs.get("containerID", "")}}})
        status["containerStatuses"] = statuses
        self._write_status(pod, status)

    def _finish_deletion(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        if meta.get("finalizers") and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            # the containers are stopped, and a pod a finalizer holds stays: a real kubelet reports it terminal
            # (its containers exited 0 on SIGTERM here), so it no longer counts among a ReplicaSet's
            # terminatingReplicas. (A pod that goes at once is deleted without that status write.)
            self._terminate(pod, "Succeeded")
            entry = self.store.get(R.PODS, meta["namespace"], meta["name"])
            if entry is None:
                return
            pod, meta = entry.obj, entry.obj["metadata"]
        self.registry.delete(R.PODS, meta["namespace"], meta["name"],
                             {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}})

    def _write_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        """Writes `status` as a kubelet does: a Go PodStatus, so nothing decoding would drop. Its parts are the
        stored (already decoded) status's and what the kubelet builds of known fields; only a list it left empty
        (no containers, no conditions) would go, as omitempty leaves it out, so that is dropped here and the body
        is not pruned again (the prune was ~4% of the sim's work per pod, issue 25)."""
        meta = pod["metadata"]
        status = {key: value for key, value in status.items() if value != []}
        self.registry.update(R.PODS, meta["namespace"], meta["name"],
                             {"metadata": {"name": meta["name"], "namespace": meta["namespace"],
                                           "resourceVersion": meta["resourceVersion"]},
                              "status": status}, subresource="status", prune=False)

    # --- node-level controls ---------------------------------------------------------------------
    def fail_pod(self, namespace: str, name: str) -> None:
        entry = self.registry.get(R.PODS, namespace, name)
        self._terminate(entry.obj, "Failed")

    def set_node_ready(self, name: str, ready: bool) -> None:
        """Flips the node's Ready condition and, as the node lifecycle controller does, its
        `node.kubernetes.io/not-ready` NoSchedule and NoExecute taints."""
        entry = self.registry.get(R.NODES, "", name)
        node = entry.clone()
        now = format_time(self.registry.clock())
        conditions = node.setdefault("status", {}).setdefault("conditions", [])
        for cond in conditions:
            if cond.get("type") == "Ready":
                status = "True" if ready else "False"
                if cond.get("status") != status:
                    cond["lastTransitionTime"] = now
                cond.update({"status": status, "lastHeartbeatTime": now,
                             "reason": "KubeletReady" if ready else "KubeletNotReady",
                             "message": "kubelet is posting ready status" if ready else
                             "container runtime network not ready"})
        spec = node.setdefault("spec", {})
        taints = [t for t in spec.get("taints") or [] if t.get("key") != "node.kubernetes.io/not-ready"]
        if not ready:
            taints += [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                       {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": now}]
        if taints:
            spec["taints"] = taints
        else:
            spec.pop("taints", None)
        self.registry.update(R.NODES, "", name, dict(node))
        status_entry = self.registry.get(R.NODES, "", name)
        self.registry.update(R.NODES, "", name, {"metadata": {"name": name,
                                                             "resourceVersion": str(status_entry.rv)},
                                                "status": node["status"]}, subresource="status")

    def _host_ip(self, node: str) -> str:
        entry = self.store.get(R.NODES, "", node)
        for addr in ((entry.obj.get("status") or {}).get("addresses") or []) if entry else []:
            if addr.get("type") == "InternalIP":
                return str(addr["address"])
        return "10.0.0.1"

    def _pod_ip(self, node: str) -> str:
        index = self._ips.get(node, 1) + 1
        self._ips[node] = index
        entry = self.store.get(R.NODES, "", node)
        cidr = ((entry.obj.get("spec") or {}).get("podCIDR") if entry else None) or "10.244.0.0/24"
        base = cidr.split("/")[0].rsplit(".", 1)[0]
        return f"{base}.{index % 254 + 1}"


def _condition(kind: str, status: str, now: str, reason: str | None = None) -> dict[str, Any]:
    cond: dict[str, Any] = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": now}
    if reason:
        cond["reason"] = reason
    return cond


def _image_id(image: str) -> str:
    digest = hashlib.sha256(image.encode()).hexdigest()
    name = image.split(":")[0]
    return f"docker.io/library/{name}@sha256:{digest}"


def _container_id(pod: dict[str, Any], name: str) -> str:
    return "containerd://" + hashlib.sha256(f"{pod['metadata'].get('uid')}/{name}".encode()).hexdigest()
