"""The defaults kube-apiserver (v1.32) fills in before it stores an object.

These are the generated defaulters of ``pkg/apis/core/v1`` and
``pkg/apis/apps/v1`` plus the fields Go's JSON encoding always writes (a
container's ``resources: {}``, a template's ``metadata.creationTimestamp:
null``, quantities in canonical form), so an object read back from the
simulator is byte-for-byte what kube-apiserver returns. That matters beyond
looks: the DaemonSet controller hashes the stored pod template, and a
template that differs in one default hashes differently from the one
kube-controller-manager would see.

Pods (not pod templates) also get what the admission plugins enabled by
default add on create: ``priority``/``preemptionPolicy`` (Priority),
the not-ready/unreachable ``NoExecute`` tolerations (DefaultTolerationSeconds)
and ``serviceAccountName: default`` (ServiceAccount). The ServiceAccount
plugin's projected token volume (``kube-api-access-*``, mounted into every
container) is left out on purpose: the simulator has no tokens to project and
the volume's random suffix would make pods differ run to run.

Defaulting is idempotent and never raises: a value of the wrong JSON type is
left alone for validation to report.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache
from math import ceil
from typing import Any

import msgspec

__all__ = ["default_object", "default_pod_spec", "default_pod_status", "format_quantity", "parse_quantity",
           "qos_class"]

_NOT_READY = "node.kubernetes.io/not-ready"
_UNREACHABLE = "node.kubernetes.io/unreachable"
_DEFAULT_TOLERATION_SECONDS = 300
# The two PriorityClasses every cluster has; any other name is looked up in a PriorityClass the sim lacks.
_SYSTEM_PRIORITIES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_FILE_MODE_SOURCES = ("secret", "configMap", "downwardAPI", "projected")


def default_object(kind: str, obj: Any) -> Any:
    """Apply kube-apiserver's defaults for ``kind`` to ``obj`` in place, and return it."""
    if isinstance(obj, dict) and (defaulter := _DEFAULTERS.get(kind)) is not None:
        defaulter(obj)
    return obj


def _ensure(parent: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The object at ``key``, created when absent or null; None when it is not an object."""
    if parent.get(key) is None:
        parent[key] = {}
    value = parent[key]
    return value if isinstance(value, dict) else None


def _dicts(parent: Any, key: str) -> list[dict[str, Any]]:
    value = parent.get(key) if isinstance(parent, dict) else None
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _unset(obj: dict[str, Any], key: str) -> bool:
    """Go's zero-value test: absent, null, "" or 0 all mean "not set"."""
    value = obj.get(key)
    return value is None or value == "" or (value == 0 and not isinstance(value, bool))


# --- pods and pod templates ----------------------------------------------------------------------


def _default_pod_spec(spec: dict[str, Any]) -> None:
    """SetDefaults_PodSpec and everything nested in it; shared by pods and templates."""
    for key, value in (("dnsPolicy", "ClusterFirst"), ("restartPolicy", "Always"),
                       ("schedulerName", "default-scheduler")):
        if _unset(spec, key):
            spec[key] = value
    if spec.get("securityContext") is None:
        spec["securityContext"] = {}
    if spec.get("terminationGracePeriodSeconds") is None:
        spec["terminationGracePeriodSeconds"] = 30
    # v1 conversion: the deprecated alias is read when the real field is empty and always written back.
    if _unset(spec, "serviceAccountName") and isinstance(spec.get("serviceAccount"), str) \
            and spec["serviceAccount"]:
        spec["serviceAccountName"] = spec["serviceAccount"]
    if isinstance(spec.get("serviceAccountName"), str) and spec["serviceAccountName"]:
        spec["serviceAccount"] = spec["serviceAccountName"]
    for volume in _dicts(spec, "volumes"):
        _default_volume(volume)
    for container in _dicts(spec, "initContainers") + _dicts(spec, "containers"):
        _default_container(container)


def _default_volume(volume: dict[str, Any]) -> None:
    if all(value is None for key, value in volume.items() if key != "name"):
        for key in [key for key in volume if key != "name"]:
            del volume[key]  # Go drops the null sources when it re-encodes
        volume["emptyDir"] = {}
    for key in _FILE_MODE_SOURCES:
        source = volume.get(key)
        if isinstance(source, dict) and source.get("defaultMode") is None:
            source["defaultMode"] = 0o644
    host_path = volume.get("hostPath")
    if isinstance(host_path, dict) and host_path.get("type") is None:
        host_path["type"] = ""
    for item in _dicts(volume.get("downwardAPI"), "items"):
        _default_field_ref(item.get("fieldRef"))
    for projection in _dicts(volume.get("projected"), "sources"):
        for item in _dicts(projection.get("downwardAPI"), "items"):
            _default_field_ref(item.get("fieldRef"))
        token = projection.get("serviceAccountToken")
        if isinstance(token, dict) and token.get("expirationSeconds") is None:
            token["expirationSeconds"] = 3600
    claim = volume.get("ephemeral")
    template = claim.get("volumeClaimTemplate") if isinstance(claim, dict) else None
    claim_spec = template.get("spec") if isinstance(template, dict) else None
    if isinstance(claim_spec, dict) and claim_spec.get("volumeMode") is None:
        claim_spec["volumeMode"] = "Filesystem"


def _default_container(container: dict[str, Any]) -> None:
    if _unset(container, "imagePullPolicy"):
        tag = image_tag(container.get("image"))
        container["imagePullPolicy"] = "Always" if tag == "latest" else "IfNotPresent"
    if _unset(container, "terminationMessagePath"):
        container["terminationMessagePath"] = "/dev/termination-log"
    if _unset(container, "terminationMessagePolicy"):
        container["terminationMessagePolicy"] = "File"
    resources = _ensure(container, "resources")
    if resources is not None:
        for key in ("limits", "requests"):
            _default_resource_list(resources.get(key))
    for port in _dicts(container, "ports"):
        if _unset(port, "protocol"):
            port["protocol"] = "TCP"
    for env in _dicts(container, "env"):
        value_from = env.get("valueFrom")
        if isinstance(value_from, dict):
            _default_field_ref(value_from.get("fieldRef"))
    for key in _PROBES:
        probe = container.get(key)
        if isinstance(probe, dict):
            for field, value in (("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1),
                                 ("failureThreshold", 3)):
                if _unset(probe, field):
                    probe[field] = value
            _default_handler(probe)
    lifecycle = container.get("lifecycle")
    if isinstance(lifecycle, dict):
        for key in ("postStart", "preStop"):
            if isinstance(lifecycle.get(key), dict):
                _default_handler(lifecycle[key])


def _default_handler(handler: dict[str, Any]) -> None:
    http_get = handler.get("httpGet")
    if isinstance(http_get, dict):
        if _unset(http_get, "path"):
            http_get["path"] = "/"
        if _unset(http_get, "scheme"):
            http_get["scheme"] = "HTTP"
    grpc = handler.get("grpc")
    if isinstance(grpc, dict) and grpc.get("service") is None:
        grpc["service"] = ""


def _default_field_ref(ref: Any) -> None:
    if isinstance(ref, dict) and _unset(ref, "apiVersion"):
        ref["apiVersion"] = "v1"


def _default_pod(pod: dict[str, Any]) -> None:
    spec = _ensure(pod, "spec")
    if spec is None:
        return
    default_pod_spec(spec)
    default_pod_status(pod)


def default_pod_spec(spec: dict[str, Any]) -> None:
    """A pod's (not a template's) spec defaults and the admission plugins' additions. They read nothing but the spec,
    and never its affinity: sim.podspecs remembers their result by the rest of the spec."""
    containers = _dicts(spec, "initContainers") + _dicts(spec, "containers")
    for container in containers:
        _requests_from_limits(container)
    _default_pod_spec(spec)
    if spec.get("enableServiceLinks") is None:
        spec["enableServiceLinks"] = True
    if spec.get("hostNetwork") is True:
        for container in containers:
            for port in _dicts(container, "ports"):
                if _unset(port, "hostPort") and "containerPort" in port:
                    port["hostPort"] = port["containerPort"]
    _admit_pod(spec)


def default_pod_status(pod: dict[str, Any]) -> None:
    """A pod's status defaults, once its spec (an object) is defaulted."""
    spec = pod["spec"]
    status = _ensure(pod, "status")
    if status is not None:
        if _unset(status, "phase"):
            status["phase"] = "Pending"
        # A status-only write carries no containers; its qosClass must come from the stored pod.
        if _unset(status, "qosClass") and isinstance(spec.get("containers"), list) and spec["containers"]:
            status["qosClass"] = qos_class(spec)


def _requests_from_limits(container: dict[str, Any]) -> None:
    """SetDefaults_Pod: a limit without a request is also the request (pods only, not templates)."""
    resources = container.get("resources")
    limits = resources.get("limits") if isinstance(resources, dict) else None
    if not isinstance(limits, dict):
        return
    requests = _ensure(resources, "requests")
    if requests is not None:
        for name, quantity in limits.items():
            requests.setdefault(name, quantity)


def _admit_pod(spec: dict[str, Any]) -> None:
    """What the Priority, DefaultTolerationSeconds and ServiceAccount admission plugins add."""
    name = spec.get("priorityClassName") or ""
    if spec.get("priority") is None and isinstance(name, str) and (not name or name in _SYSTEM_PRIORITIES):
        spec["priority"] = _SYSTEM_PRIORITIES.get(name, 0)
        if spec.get("preemptionPolicy") is None:
            spec["preemptionPolicy"] = "PreemptLowerPriority"
    if spec.get("tolerations") is None:
        spec["tolerations"] = []
    tolerations = spec["tolerations"]
    if isinstance(tolerations, list):
        for key in (_NOT_READY, _UNREACHABLE):
            if not any(_tolerates_no_execute(t, key) for t in tolerations):
                tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                    "tolerationSeconds": _DEFAULT_TOLERATION_SECONDS})
    if _unset(spec, "serviceAccountName"):
        spec["serviceAccountName"] = spec["serviceAccount"] = "default"


def _tolerates_no_execute(toleration: Any, key: str) -> bool:
    if not isinstance(toleration, dict):
        return False
    return toleration.get("key") in (key, "", None) and toleration.get("effect") in ("NoExecute", "", None)


def _default_template(template: dict[str, Any]) -> None:
    metadata = _ensure(template, "metadata")
    if metadata is not None:
        # metav1.Time marshals its zero value as null, and v1.32 does not omit it.
        metadata.setdefault("creationTimestamp", None)
    spec = _ensure(template, "spec")
    if spec is not None:
        _default_pod_spec(spec)


# --- apps ----------------------------------------------------------------------------------------


def _default_daemonset(ds: dict[str, Any]) -> None:
    spec = _ensure(ds, "spec")
    if spec is None:
        return
    strategy = _ensure(spec, "updateStrategy")
    if strategy is not None:
        if _unset(strategy, "type"):
            strategy["type"] = "RollingUpdate"
        if strategy["type"] == "RollingUpdate" and (rolling := _ensure(strategy, "rollingUpdate")) is not None:
            if rolling.get("maxUnavailable") is None:
                rolling["maxUnavailable"] = 1
            if rolling.get("maxSurge") is None:
                rolling["maxSurge"] = 0
    if spec.get("revisionHistoryLimit") is None:
        spec["revisionHistoryLimit"] = 10
    if (template := _ensure(spec, "template")) is not None:
        _default_template(template)


def _default_replicaset(rs: dict[str, Any]) -> None:
    spec = _ensure(rs, "spec")
    if spec is None:
        return
    if spec.get("replicas") is None:
        spec["replicas"] = 1
    if (template := _ensure(spec, "template")) is not None:
        _default_template(template)


def _default_namespace(ns: dict[str, Any]) -> None:
    meta = ns.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("name"), str) and meta["name"]:
        labels = _ensure(meta, "labels")
        if labels is not None:
            labels["kubernetes.io/metadata.name"] = meta["name"]
    spec = _ensure(ns, "spec")
    # The namespace strategy adds "kubernetes" on create only (the finalize call removes it later), and
    # this runs on updates too: so only a namespace that never had the list gets it.
    if spec is not None and spec.get("finalizers") is None:
        spec["finalizers"] = ["kubernetes"]
    status = _ensure(ns, "status")
    if status is not None and _unset(status, "phase"):
        status["phase"] = "Active"


def _default_node(node: dict[str, Any]) -> None:
    _ensure(node, "spec")
    status = _ensure(node, "status")
    if status is None:
        return
    if status.get("allocatable") is None and isinstance(status.get("capacity"), dict):
        status["allocatable"] = dict(status["capacity"])
    for key in ("capacity", "allocatable"):
        _default_resource_list(status.get(key))


def _default_event(event: dict[str, Any]) -> None:
    # Nothing is defaulted; these are the fields core/v1 Event always serializes.
    for key in ("involvedObject", "source"):
        _ensure(event, key)
    for key, value in (("firstTimestamp", None), ("lastTimestamp", None), ("eventTime", None),
                       ("reportingComponent", ""), ("reportingInstance", "")):
        event.setdefault(key, value)


def _default_controller_revision(revision: dict[str, Any]) -> None:
    revision.setdefault("revision", 0)  # an int64 without omitempty


def _default_binding(obj: dict[str, Any]) -> None:
    """SetDefaults_Subject: User and Group subjects are in the RBAC group (ServiceAccounts in the core one, "")."""
    for subject in obj.get("subjects") or ():
        if isinstance(subject, dict) and not subject.get("apiGroup") and subject.get("kind") in ("User", "Group"):
            subject["apiGroup"] = "rbac.authorization.k8s.io"


_DEFAULTERS = {
    "RoleBinding": _default_binding,
    "ClusterRoleBinding": _default_binding,
    "Pod": _default_pod,
    "DaemonSet": _default_daemonset,
    "ReplicaSet": _default_replicaset,
    "Namespace": _default_namespace,
    "Node": _default_node,
    "Event": _default_event,
    "ControllerRevision": _default_controller_revision,
}


# --- images, quantities, QoS ---------------------------------------------------------------------

_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_REFERENCE = re.compile(
    rf"(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?"
    r"(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?"
)


def image_tag(image: Any) -> str | None:
    """parsers.ParseImageName's tag: "latest" when neither tag nor digest is given, None if unparseable."""
    if not isinstance(image, str) or not (match := _REFERENCE.fullmatch(image)):
        return None
    if len(match["name"]) > 255 or re.fullmatch(r"[a-f0-9]{64}", image):
        return None
    if match["tag"]:
        return match["tag"]
    return None if match["digest"] else "latest"


_QUANTITY = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE]?)")
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {exponent: suffix for suffix, exponent in _DECIMAL.items()}
_BINARY_SUFFIX = {exponent: suffix for suffix, exponent in _BINARY.items()} | {0: ""}


def parse_quantity(value: Any) -> tuple[Fraction, str] | None:
    """resource.ParseQuantity: the exact value and its format (BinarySI, DecimalSI, DecimalExponent)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    return _parse_text(repr(value) if isinstance(value, float) else str(value))


@lru_cache(maxsize=4096)  # a cluster uses few distinct quantities, and parsing them is costly
def _parse_text(text: str) -> tuple[Fraction, str] | None:
    match = _QUANTITY.fullmatch(text)
    if match is None or not (match[2] or match[3]):
        return None
    sign, whole, fraction, suffix = match.groups()
    fraction = fraction or ""
    number = Fraction(int(whole or "0") * 10 ** len(fraction) + int(fraction or "0"), 10 ** len(fraction))
    if suffix in _BINARY:
        number, fmt = number * 2 ** _BINARY[suffix], "BinarySI"
    elif suffix[:1] in ("e", "E"):
        number, fmt = number * Fraction(10) ** int(suffix[1:]), "DecimalExponent"
    else:
        number, fmt = number * Fraction(10) ** _DECIMAL[suffix], "DecimalSI"
    return (-number if sign == "-" else number), fmt


def format_quantity(value: Fraction, fmt: str) -> str:
    """Quantity.String(): the canonical form kube-apiserver writes back (``0.5`` -> ``500m``)."""
    if value == 0:
        return "0"
    sign, magnitude = ("-" if value < 0 else ""), abs(value)
    if fmt == "BinarySI" and magnitude >= 1024 and magnitude.denominator == 1:
        number, exponent = int(magnitude), 0
        while number % 1024 == 0 and exponent < 60:
            number, exponent = number // 1024, exponent + 10
        return f"{sign}{number}{_BINARY_SUFFIX[exponent]}"
    exponent = 0
    while magnitude.denominator != 1:
        magnitude, exponent = magnitude * 1000, exponent - 3
    number = int(magnitude)
    while number % 1000 == 0:
        number, exponent = number // 1000, exponent + 3
    if fmt == "DecimalExponent":
        suffix = f"e{exponent}" if exponent else ""
    else:
        suffix = _DECIMAL_SUFFIX.get(exponent, f"e{exponent}")
    return f"{sign}{number}{suffix}"


def _default_resource_list(resources: Any) -> None:
    """SetDefaults_ResourceList: round up to milli-units, then the canonical spelling."""
    if not isinstance(resources, dict):
        return
    for name, value in resources.items():
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            canonical = _canonical_quantity(value)
            if canonical is not None:
                resources[name] = canonical


@lru_cache(maxsize=4096)
def _canonical_quantity(value: str | int | float) -> str | None:
    parsed = parse_quantity(value)
    if parsed is None:
        return None
    number, fmt = parsed
    milli = number * 1000
    rounded = Fraction(ceil(milli) if milli >= 0 else -ceil(-milli), 1000)
    return format_quantity(rounded, fmt)


def qos_class(spec: dict[str, Any]) -> str:
    """qos.GetPodQOS over cpu and memory of all containers (init included); zero quantities do not count."""
    # pods of one controller share their resources: compute once per distinct set
    shape = msgspec.json.encode([[c.get("resources") for c in _dicts(spec, key)]
                                 for key in ("initContainers", "containers")])
    return _qos_class_of(shape)


@lru_cache(maxsize=1024)
def _qos_class_of(shape: bytes) -> str:
    init, main = msgspec.json.decode(shape)
    return _qos_class({"initContainers": [{"resources": r} for r in init],
                       "containers": [{"resources": r} for r in main]})


def _qos_class(spec: dict[str, Any]) -> str:
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    guaranteed = True
    for container in _dicts(spec, "initContainers") + _dicts(spec, "containers"):
        resources = container.get("resources")
        resources = resources if isinstance(resources, dict) else {}
        for key, totals in (("requests", requests), ("limits", limits)):
            found = set()
            quantities = resources.get(key)
            for name, value in (quantities.items() if isinstance(quantities, dict) else ()):
                parsed = parse_quantity(value)
                if name in ("cpu", "memory") and parsed is not None and parsed[0] > 0:
                    totals[name] = totals.get(name, Fraction(0)) + parsed[0]
                    found.add(name)
            if key == "limits" and found != {"cpu", "memory"}:
                guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and all(limits.get(name) == value for name, value in requests.items()) \
            and len(requests) == len(limits):
        return "Guaranteed"
    return "Burstable"
