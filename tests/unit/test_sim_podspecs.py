"""A created pod's spec is pruned and defaulted once per distinct spec (sim.podspecs, issue 25), and the sim answers
exactly as it did when it walked every pod's spec.

Two registries of the same seed and clock create the same bodies, one answering pod specs from the memory (a JSON
body) and one walking each (what the sim did before): every answer (the stored JSON, or the error), every warning
and every stored event's bytes must be the same. The bodies cover what the prune drops (nulls, empty lists and
maps, unknown fields in and outside the affinity, in the metadata, the status and the top level, in every order),
what defaulting sets (containers, probes, volumes, quantities, host ports, priorities, tolerations, service
accounts), invalid and wrong-typed values, strategic-merge directives, a DaemonSet's pods pinned to their nodes,
and random specs built from the Pod schema; each is created several times, so that later ones come from memory.
Likewise a DaemonSet's pin (sim.podspecs.pinned_node), which neither the prune nor the validation walks, answers as
walked, and the JSON the memory hands the validation is the one it would encode.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestClient, TestServer

from sim import defaulting, podspecs, schema, validation_apps
from sim import resources as R
from sim import status as errors
from sim.cluster import SimCluster, SimConfig
from sim.nodes import generate
from sim.registry import Decoding, Registry
from sim.store import ObjectStore
from tests.unit.test_sim_prune_equivalence import _random

_NOW = datetime(2026, 11, 29, 19, 0, 0, tzinfo=UTC)
_CONTAINER = {"name": "c", "image": "busybox:1.36"}


def _registry() -> Registry:
    registry = Registry(ObjectStore(), clock=lambda: _NOW, seed=7)
    registry.create(R.NAMESPACES, "", {"metadata": {"name": "default"}})
    return registry


def _pinned(node: str, **extra: Any) -> dict[str, Any]:
    """A DaemonSet's node affinity pinning a pod to `node` (what the reconciler sends)."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}], **extra}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def _daemon_pod(node: str) -> dict[str, Any]:
    tolerations = [{"key": f"node.kubernetes.io/{key}", "operator": "Exists", "effect": effect}
                   for key, effect in (("not-ready", "NoExecute"), ("unreachable", "NoExecute"),
                                       ("disk-pressure", "NoSchedule"), ("unschedulable", "NoSchedule"))]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "agent-", "labels": {"app": "agent"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
                                              "uid": "u-1", "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"containers": [{"name": "agent", "image": "registry.k8s.io/agent:1",
                                     "imagePullPolicy": "IfNotPresent", "resources": {},
                                     "terminationMessagePath": "/dev/termination-log",
                                     "terminationMessagePolicy": "File"}],
                     "dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "schedulerName": "default-scheduler",
                     "securityContext": {}, "terminationGracePeriodSeconds": 30, "tolerations": tolerations,
                     "affinity": _pinned(node)}}


# Pod specs (the rest of each body is a plain pod's), each answered as before from memory and without it
SPECS: dict[str, Any] = {
    "minimal": {"containers": [_CONTAINER]},
    "empty and null containers": {"containers": [_CONTAINER], "volumes": [], "nodeSelector": {},
                                  "tolerations": [], "initContainers": None, "imagePullSecrets": None,
                                  "overhead": {}},
    "empty fields in a container": {"containers": [{**_CONTAINER, "env": [], "ports": [], "args": None,
                                                    "resources": {"limits": {}, "requests": None}}]},
    "unknown fields in the spec": {"containers": [{**_CONTAINER, "colour": "red"}], "flavour": 1,
                                   "securityContext": {"runAsUser": 1, "extra": True}},
    "unknown fields in the affinity only": {"containers": [_CONTAINER],
                                            "affinity": {"nodeAffinity": {"unknown": 1}, "other": []}},
    "unknown fields before and after the affinity": {"zzz": 1, "affinity": _pinned("n-1", odd=True),
                                                     "containers": [{**_CONTAINER, "colour": "red"}]},
    "affinity first": {"affinity": _pinned("n-1"), "containers": [_CONTAINER], "volumes": []},
    "affinity last": {"containers": [_CONTAINER], "hostname": "h", "affinity": _pinned("n-2")},
    "affinity with empty lists": {"containers": [_CONTAINER],
                                  "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [],
                                                                "requiredDuringSchedulingIgnoredDuringExecution": {
                                                                    "nodeSelectorTerms": [{"matchFields": [],
                                                                                           "matchExpressions": None}]
                                                                }}}},
    "affinity null": {"containers": [_CONTAINER], "affinity": None},
    "affinity empty": {"containers": [_CONTAINER], "affinity": {}},
    "affinity not an object": {"containers": [_CONTAINER], "affinity": "near"},
    "affinity of a pod and its anti-affinity": {"containers": [_CONTAINER], "affinity": {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"a": "b"}}, "topologyKey": "zone"}]},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}},
    "resources to default": {"containers": [{**_CONTAINER, "resources": {
        "limits": {"cpu": "0.5", "memory": "1Gi", "example.com/gpu": 1}, "requests": {"cpu": "100m"}}}],
        "initContainers": [{"name": "init", "image": "busybox:latest", "resources": {"limits": {"cpu": 2.5}}}]},
    "probes and lifecycle": {"containers": [{**_CONTAINER, "livenessProbe": {"httpGet": {"port": 80}},
                                             "readinessProbe": {"grpc": {"port": 9}, "periodSeconds": 0},
                                             "startupProbe": {"exec": {"command": ["true"]}},
                                             "lifecycle": {"preStop": {"httpGet": {"port": 1, "path": ""}}},
                                             "env": [{"name": "N", "valueFrom": {"fieldRef": {
                                                 "fieldPath": "metadata.name"}}}],
                                             "ports": [{"containerPort": 80}, {"containerPort": 81,
                                                                                "protocol": "UDP"}]}]},
    "volumes to default": {"containers": [_CONTAINER], "volumes": [
        {"name": "empty"}, {"name": "s", "secret": {"secretName": "x"}}, {"name": "cm", "configMap": {"name": "y"}},
        {"name": "h", "hostPath": {"path": "/var"}},
        {"name": "d", "downwardAPI": {"items": [{"path": "p", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
        {"name": "pr", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}},
        {"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}}]},
    "host network": {"hostNetwork": True, "containers": [{**_CONTAINER, "ports": [{"containerPort": 8080}]}]},
    "host network not a boolean": {"hostNetwork": 1, "containers": [{**_CONTAINER, "ports": [{"containerPort": 1}]}]},
    "priorities and tolerations": {"priorityClassName": "system-node-critical", "containers": [_CONTAINER],
                                   "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]},
    "unknown priority class": {"priorityClassName": "mine", "containers": [_CONTAINER], "tolerations": None},
    "service account alias": {"serviceAccount": "robot", "containers": [_CONTAINER]},
    "a float and zeros": {"terminationGracePeriodSeconds": 30.0, "restartPolicy": "", "dnsPolicy": None,
                          "containers": [{**_CONTAINER, "imagePullPolicy": ""}]},
    "strategic directives": {"$patch": "replace", "$setElementOrder/containers": [{"name": "c"}],
                             "containers": [{**_CONTAINER, "$patch": "merge"}]},
    "invalid values": {"restartPolicy": "Sometimes", "containers": [{"name": "C_1", "image": ""}],
                       "tolerations": [{"operator": "Equal"}], "affinity": _pinned("")},
    "wrong types": {"containers": "one", "volumes": {"a": 1}, "tolerations": "all", "securityContext": [],
                    "affinity": {"nodeAffinity": []}},
    "no containers": {"containers": []},
    "an empty spec": {},
}

BODY_ORDERS = {
    "metadata first": lambda meta, spec: {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec},
    "spec first, unknown fields around it": lambda meta, spec: {
        "spec": spec, "junk": 1, "metadata": {**meta, "colour": "red"},
        "status": {"phase": "Running", "hostIP": "1.2.3.4", "bogus": [], "conditions": []}},
}


def _answer(registry: Registry, body: dict[str, Any], validate: bool, mode: str, from_json: bool) -> tuple[Any, ...]:
    """What a create answers: the stored JSON or the error, and the warnings (the body copied from its JSON)."""
    decoding = Decoding(mode, from_json=from_json)
    try:
        entry = registry.create(R.PODS, "default", msgspec.json.decode(msgspec.json.encode(body)), decoding,
                                validate=validate)
    except errors.ApiError as exc:
        return "error", exc.status(), decoding.warnings
    return "created", entry.raw, decoding.warnings


def _history(registry: Registry) -> list[tuple[int, str, bytes]]:
    return [(event.rv, event.type, event.entry.raw) for event in registry.store.events_since(registry.store.oldest_rv)]


def _bodies() -> Iterator[tuple[str, dict[str, Any], bool]]:
    """(what, the body, whether to validate it)"""
    for n, (name, spec) in enumerate(SPECS.items()):
        for order, body in BODY_ORDERS.items():
            for i in range(2):  # the second from memory (unless the spec has unknown fields)
                yield f"{name}, {order}", body({"name": f"p-{n}-{len(order)}-{i}", "labels": {"app": "a"}}, spec), True
    for node in ("n-1", "n-2", "n-3", "n-2"):
        yield f"pinned to {node}", _daemon_pod(node), True
    rng = random.Random(10)
    pod_spec = schema.root("Pod")["spec"]  # type: ignore[index]
    for i in range(150):
        spec = _random(pod_spec, rng, 1)
        if isinstance(spec, dict) and rng.random() < 0.7:
            _drop_unknown_fields(spec, pod_spec)  # many random specs have none: those are remembered
        for j, validate in enumerate((True, False, False)):  # stored unvalidated too: most are invalid
            yield f"random spec {i}", {"metadata": {"name": f"r-{i}-{j}"}, "spec": copy.deepcopy(spec)}, validate


def _drop_unknown_fields(value: Any, node: Any) -> None:
    if isinstance(node, tuple) and node[1] is not None and isinstance(value, list | dict):
        for element in (value if isinstance(value, list) else value.values()):
            _drop_unknown_fields(element, node[1])
    elif isinstance(node, dict) and isinstance(value, dict):
        for key in [key for key in value if key not in node and not key.startswith("$")]:
            del value[key]
        for key, child in value.items():
            _drop_unknown_fields(child, node.get(key))


def _counting_lookups(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The answers of sim.podspecs from here on (its memory emptied first): whether it prepared the spec."""
    monkeypatch.setattr(podspecs, "_changes", {})
    answers: list[bool] = []
    real = podspecs.prepare

    def prepare(spec: Any) -> bytes | None:
        prepared = real(spec)
        answers.append(prepared is not None)
        return prepared

    monkeypatch.setattr(podspecs, "prepare", prepare)
    return answers


@pytest.mark.parametrize("mode", ["Warn", "Strict", "Ignore"])
def test_every_create_answers_as_without_the_memory(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    remembered, walked = _registry(), _registry()
    answers = _counting_lookups(monkeypatch)
    for what, body, validate in _bodies():
        assert _answer(remembered, body, validate, mode, True) == _answer(walked, body, validate, mode, False), what
    assert _history(remembered) == _history(walked)
    assert len(_history(walked)) > (100 if mode == "Strict" else 250)
    assert sum(answers) > 200  # most specs were answered by the memory


def test_the_validation_is_handed_the_json_it_would_encode(monkeypatch: pytest.MonkeyPatch) -> None:
    """The JSON the memory hands the validation's memory of pod specs with a remembered spec is what the validation
    would encode of the spec it validates, without the affinity. (The comparison above cannot see a JSON that only
    tells the specs apart: the validation's memory would answer each spec with its own errors all the same.)"""
    registry = _registry()
    answers = _counting_lookups(monkeypatch)
    handed: list[tuple[bytes, bytes]] = []
    real = validation_apps.validate_pod_spec

    def validating(spec: dict[str, Any], path: str, errs: Any, rest_json: bytes | None = None) -> None:
        if rest_json is not None:
            handed.append((rest_json, msgspec.json.encode({k: v for k, v in spec.items() if k != "affinity"})))
        real(spec, path, errs, rest_json)

    monkeypatch.setattr(validation_apps, "validate_pod_spec", validating)
    for _, body, validate in _bodies():
        if validate:
            _answer(registry, body, True, "Warn", True)
    assert len(handed) == sum(answers) > 100  # every remembered spec's JSON was handed on
    assert all(given == encoded for given, encoded in handed)


def test_a_spec_is_pruned_and_defaulted_once_for_its_pods(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = _registry()
    _counting_lookups(monkeypatch)
    walks: list[str] = []
    real_prune, real_default = schema.prune, defaulting.default_pod_spec

    def pruning(kind: str, obj: dict[str, Any]) -> list[str]:
        walks.append("prune " + ",".join(sorted(obj["spec"])))
        return real_prune(kind, obj)

    def defaulting_spec(spec: dict[str, Any]) -> None:
        walks.append("default")
        real_default(spec)

    monkeypatch.setattr(schema, "prune", pruning)
    monkeypatch.setattr(defaulting, "default_pod_spec", defaulting_spec)
    for node in ("node-a", "node-b", "node-c"):
        registry.create(R.PODS, "default", _daemon_pod(node), Decoding(from_json=True))
    # the spec once; then for each pod the prune of its top level and metadata, its affinity not walked: a
    # DaemonSet's pin (sim.podspecs.pinned_node), which the prune would leave as it is
    assert walks == ["prune affinity,containers,dnsPolicy,restartPolicy,schedulerName,securityContext,"
                     "terminationGracePeriodSeconds,tolerations", "default"] + ["prune "] * 3
    pods = [entry.obj for entry in registry.store.iter(R.PODS)]
    assert sorted(pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                  ["nodeSelectorTerms"][0]["matchFields"][0]["values"][0] for pod in pods) == ["node-a", "node-b",
                                                                                               "node-c"]
    assert len({msgspec.json.encode({**pod["spec"], "affinity": None}) for pod in pods}) == 1


def _requirement(**changes: Any) -> dict[str, Any]:
    return {**{"key": "metadata.name", "operator": "In", "values": ["n-1"]}, **changes}


def _term_affinity(*terms: Any, **node_affinity: Any) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)},
                             **node_affinity}}


# Affinities of a DaemonSet's pod: pins, which neither the prune nor the validation walks, and all but pins
AFFINITIES: dict[str, Any] = {
    "a pin": _pinned("n-1"),
    "a pin to an empty name": _pinned(""),
    "a pin to an invalid name": _pinned("Node_1."),
    "a pin to a name ending in a dash": _pinned("node-"),
    "a pin to a long name": _pinned("a" * 254),
    "a number": _term_affinity({"matchFields": [_requirement(values=[1])]}),
    "null": _term_affinity({"matchFields": [_requirement(values=[None])]}),
    "a boolean": _term_affinity({"matchFields": [_requirement(values=[True])]}),
    "two values": _term_affinity({"matchFields": [_requirement(values=["n-1", "n-2"])]}),
    "no value": _term_affinity({"matchFields": [_requirement(values=[])]}),
    "values not a list": _term_affinity({"matchFields": [_requirement(values="n-1")]}),
    "NotIn": _term_affinity({"matchFields": [_requirement(operator="NotIn")]}),
    "another operator": _term_affinity({"matchFields": [_requirement(operator="in")]}),
    "another key": _term_affinity({"matchFields": [_requirement(key="metadata.namespace")]}),
    "an unknown field in the requirement": _term_affinity({"matchFields": [_requirement(colour=1)]}),
    "an unknown field in the term": _pinned("n-1", odd=True),
    "empty match expressions": _pinned("n-1", matchExpressions=[]),
    "null match expressions": _pinned("n-1", matchExpressions=None),
    "match expressions": _pinned("n-1", matchExpressions=[{"key": "k", "operator": "Exists"}]),
    "two requirements": _term_affinity({"matchFields": [_requirement(), _requirement(values=["n-2"])]}),
    "two terms": _term_affinity({"matchFields": [_requirement()]}, {"matchFields": [_requirement()]}),
    "an empty preferred list": _term_affinity({"matchFields": [_requirement()]},
                                              preferredDuringSchedulingIgnoredDuringExecution=[]),
    "a preference": _term_affinity({"matchFields": [_requirement()]}, preferredDuringSchedulingIgnoredDuringExecution=[
        {"weight": 0, "preference": {"matchFields": [_requirement()]}}]),
    "an unknown field in the node affinity": _term_affinity({"matchFields": [_requirement()]}, extra=1),
    "a pod affinity too": {**_pinned("n-1"), "podAffinity": {}},
    "an unknown field in the affinity": {**_pinned("n-1"), "extra": []},
    "terms not a list": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": {"0": {"matchFields": [_requirement()]}}}}},
    "terms empty": _term_affinity(),
    "match fields null": _term_affinity({"matchFields": None}),
    "a requirement not an object": _term_affinity({"matchFields": [["n-1"]]}),
}


@pytest.mark.parametrize("mode", ["Warn", "Strict"])
def test_a_daemonsets_pin_answers_as_walked(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The create of a pod pinned to its node (the reconciler's DaemonSet pods) answers as when its affinity is
    walked by the prune and the validation: the stored JSON, or the error, and the warnings; and only the pins go
    unwalked."""
    pinned, walked = _registry(), _registry()
    answers = []
    real = podspecs.pinned_node
    for n, (what, affinity) in enumerate(AFFINITIES.items()):
        body = _daemon_pod("n-1")
        body["metadata"]["name"] = f"p-{n}"
        body["spec"]["affinity"] = affinity
        monkeypatch.setattr(podspecs, "pinned_node", real)
        answer = _answer(pinned, body, True, mode, True)
        answers.append((what, real(msgspec.json.decode(msgspec.json.encode(affinity))) is not None))
        monkeypatch.setattr(podspecs, "pinned_node", lambda affinity: None)
        assert answer == _answer(walked, body, True, mode, True), what
    assert _history(pinned) == _history(walked)
    assert [what for what, is_pin in answers if is_pin] == [what for what in AFFINITIES if what.startswith("a pin")]


def test_each_pod_gets_its_own_lists_and_objects() -> None:
    """Stored objects are never changed, but a pod's spec is its own: what the memory sets is not shared."""
    registry = _registry()
    first, second = (registry.create(R.PODS, "default", {"metadata": {"name": name}, "spec": {"containers": [
        _CONTAINER]}}, Decoding(from_json=True)).obj["spec"] for name in ("first", "second"))
    assert first == second and first["tolerations"] and first["securityContext"] == {}
    for name in ("containers", "tolerations", "securityContext"):
        assert first[name] is not second[name], name


def test_a_body_not_from_json_is_walked_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """A set shares its JSON with a list, but neither the prune nor defaulting read it as one: a body that may hold
    one (not decoded from JSON) is not answered by the memory, though a list's spec of the same JSON is in it."""
    registry = _registry()
    answers = _counting_lookups(monkeypatch)
    listed = {"containers": [_CONTAINER], "volumes": []}
    registry.create(R.PODS, "default", {"metadata": {"name": "listed"}, "spec": listed}, Decoding(from_json=True))
    assert answers == [True]  # remembered
    with pytest.raises(errors.ApiError, match=r"spec.volumes: Invalid value: \"set\(\)\": must be of type array"):
        registry.create(R.PODS, "default", {"metadata": {"name": "a-set"},
                                            "spec": {"containers": [_CONTAINER], "volumes": set()}}, Decoding())
    assert answers == [True]  # not looked up: the list's spec (valid) would have answered


async def test_the_api_server_remembers_json_bodies_only(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = SimCluster(SimConfig(nodes=generate(1), seed=1))
    cluster._seed()
    answers = _counting_lookups(monkeypatch)
    path = "/api/v1/namespaces/default/pods"
    async with TestClient(TestServer(cluster.app())) as client:
        sent = await client.post(path, data=b'{"metadata": {"name": "j"}, "spec": {"containers": '
                                             b'[{"name": "c", "image": "busybox"}]}}',
                                 headers={"Content-Type": "application/json"})
        assert sent.status == 201, await sent.text()
        sent = await client.post(path, data=b"metadata: {name: y}\nspec: {containers: [{name: c, image: busybox}]}\n",
                                 headers={"Content-Type": "application/yaml"})
        assert sent.status == 201, await sent.text()
    assert answers == [True]  # the JSON body's spec, not the YAML's
