"""The nodes a simulated cluster starts with: names, labels, taints and capacity."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

DEFAULT_CAPACITY = {"cpu": "4", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"}
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass
class InitialNode:
    """One node the simulated cluster starts with, as flags or a nodes file describe it."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    capacity: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_CAPACITY))
    unschedulable: bool = False


def parse_labels(text: str) -> dict[str, str]:
    """`a=b,c=d` as kubectl's --labels takes it."""
    labels: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise ValueError(f"label {part!r}: expected KEY=VALUE")
        labels[key] = value
    return labels


def parse_taint(text: str) -> dict[str, str]:
    """`key=value:Effect` or `key:Effect`, as `kubectl taint` writes them."""
    spec, sep, effect = text.rpartition(":")
    if not sep or effect not in _EFFECTS:
        raise ValueError(f"taint {text!r}: expected KEY[=VALUE]:EFFECT with EFFECT one of {', '.join(_EFFECTS)}")
    key, _, value = spec.partition("=")
    taint = {"key": key, "effect": effect}
    if value:
        taint["value"] = value
    return taint


def parse_capacity(text: str) -> dict[str, str]:
    capacity = dict(DEFAULT_CAPACITY)
    capacity.update(parse_labels(text))
    return capacity


def generate(count: int, prefix: str = "node-", labels: dict[str, str] | None = None,
             taints: list[dict[str, str]] | None = None, capacity: dict[str, str] | None = None) -> list[InitialNode]:
    width = max(len(str(count - 1)), 1) if count else 1
    return [InitialNode(f"{prefix}{i:0{width}d}", dict(labels or {}), list(taints or []),
                     dict(capacity or DEFAULT_CAPACITY)) for i in range(count)]


def load_file(path: str) -> list[InitialNode]:
    """A YAML list of nodes: `- {name: n1, labels: {...}, taints: ["k=v:NoSchedule"], capacity: {...}}`."""
    with open(path) as handle:
        data = yaml.safe_load(handle) or []
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a YAML list of nodes")
    specs = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or "name" not in item:
            raise ValueError(f"{path}: node {i}: expected a mapping with a name")
        taints = [parse_taint(t) if isinstance(t, str) else dict(t) for t in item.get("taints") or []]
        capacity = dict(DEFAULT_CAPACITY)
        capacity.update({k: str(v) for k, v in (item.get("capacity") or {}).items()})
        specs.append(InitialNode(str(item["name"]), {k: str(v) for k, v in (item.get("labels") or {}).items()},
                              taints, capacity, bool(item.get("unschedulable", False))))
    return specs


def node_object(spec: InitialNode, index: int, now: str) -> dict[str, Any]:
    """A Node as a kubelet registers it: standard labels, Ready, addresses, capacity."""
    labels = {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
              "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": spec.name, "kubernetes.io/os": "linux",
              "type": "kwok", **spec.labels}
    octet_hi, octet_lo = divmod(index + 1, 250)
    node_spec: dict[str, Any] = {"podCIDR": f"10.{(index // 250) % 250}.{index % 250}.0/24"}
    node_spec["podCIDRs"] = [node_spec["podCIDR"]]
    if spec.taints:
        node_spec["taints"] = [dict(t) for t in spec.taints]
    if spec.unschedulable:
        node_spec["unschedulable"] = True
    condition = {"lastHeartbeatTime": now, "lastTransitionTime": now}
    return {
        "kind": "Node", "apiVersion": "v1",
        "metadata": {"name": spec.name, "labels": labels,
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"}},
        "spec": node_spec,
        "status": {
            "capacity": dict(spec.capacity), "allocatable": dict(spec.capacity),
            "conditions": [
                {"type": "MemoryPressure", "status": "False", **condition, "reason": "KubeletHasSufficientMemory",
                 "message": "kubelet has sufficient memory available"},
                {"type": "DiskPressure", "status": "False", **condition, "reason": "KubeletHasNoDiskPressure",
                 "message": "kubelet has no disk pressure"},
                {"type": "PIDPressure", "status": "False", **condition, "reason": "KubeletHasSufficientPID",
                 "message": "kubelet has sufficient PID available"},
                {"type": "Ready", "status": "True", **condition, "reason": "KubeletReady",
                 "message": "kubelet is posting ready status"},
            ],
            "addresses": [{"type": "InternalIP", "address": f"10.{250 + octet_hi % 5}.{octet_hi // 5 % 250}."
                                                            f"{octet_lo + 1}"},
                          {"type": "Hostname", "address": spec.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "6.1.0-kubus",
                         "osImage": "kubus sim", "containerRuntimeVersion": "containerd://1.7.0",
                         "kubeletVersion": "v1.32.0-kubus-sim", "kubeProxyVersion": "",
                         "operatingSystem": "linux", "architecture": "amd64"},
        },
    }
