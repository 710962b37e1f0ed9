"""Server-side printing: the `meta.k8s.io/v1` Table that `kubectl get` asks for.

Columns and cell values follow kube-apiserver's printers (pkg/printers/internalversion) for the
kinds the sim serves, so `kubectl get` output looks as on a real cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from kube.times import parse_time
from sim import resources as R
from sim.resources import ApiResource

Cells = list[Any]
Column = dict[str, Any]


def _col(name: str, kind: str = "string", priority: int = 0, fmt: str = "") -> Column:
    column: Column = {"name": name, "type": kind, "format": fmt, "description": "", "priority": priority}
    return column


NAME = _col("Name", fmt="name")
AGE = _col("Age")


def age(timestamp: str | None, now: datetime) -> str:
    """kube's HumanDuration of now - timestamp."""
    if not timestamp:
        return "<unknown>"
    try:  # a metav1.Time, or a MicroTime (an event's eventTime) with fractional seconds
        then = parse_time(timestamp)
    except ValueError:
        return "<unknown>"
    return human_duration((now - then).total_seconds())


def human_duration(seconds: float) -> str:
    s = int(seconds)
    if s < 0:
        return "<invalid>"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rem = s % 60
        return f"{minutes}m{rem}s" if rem else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rem = (s % 3600) // 60
        return f"{hours}h{rem}m" if rem else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if days < 8:
        rem = hours % 24
        return f"{days}d{rem}h" if rem else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y"


def selector_string(selector: dict[str, Any] | None) -> str:
    if not selector:
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op = expr.get("operator", "")
        values = ",".join(expr.get("values") or [])
        key = expr.get("key", "")
        parts.append({"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})",
                      "Exists": key, "DoesNotExist": f"!{key}"}.get(op, key))
    return ",".join(parts) or "<none>"


def _pod_status(pod: dict[str, Any]) -> tuple[str, int, str]:
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    restarts = 0
    ready = 0
    statuses = status.get("containerStatuses") or []
    for cs in statuses:
        restarts += cs.get("restartCount", 0)
        if cs.get("ready"):
            ready += 1
        state = cs.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated"):
            term = state["terminated"]
            reason = term.get("reason") or f"ExitCode:{term.get('exitCode', 0)}"
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    total = len(pod.get("spec", {}).get("containers") or [])
    return reason, restarts, f"{ready}/{total}"


def _pod(pod: dict[str, Any], now: datetime) -> Cells:
    reason, restarts, ready = _pod_status(pod)
    status = pod.get("status") or {}
    return [pod["metadata"]["name"], ready, reason, restarts, age(pod["metadata"].get("creationTimestamp"), now),
            status.get("podIP") or "<none>", pod.get("spec", {}).get("nodeName") or "<none>",
            status.get("nominatedNodeName") or "<none>", "<none>"]


def _node(node: dict[str, Any], now: datetime) -> Cells:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    state = "Unknown" if ready is None else ("Ready" if ready.get("status") == "True" else "NotReady")
    if (node.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = node["metadata"].get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    info = (node.get("status") or {}).get("nodeInfo") or {}
    addresses = (node.get("status") or {}).get("addresses") or []
    internal = next((a["address"] for a in addresses if a.get("type") == "InternalIP"), "<none>")
    return [node["metadata"]["name"], state, ",".join(roles) or "<none>",
            age(node["metadata"].get("creationTimestamp"), now), info.get("kubeletVersion", ""),
            internal, "<none>", info.get("osImage", "<unknown>"), info.get("kernelVersion", "<unknown>"),
            info.get("containerRuntimeVersion", "<unknown>")]


def _containers(template: dict[str, Any]) -> tuple[str, str]:
    containers = (template.get("spec") or {}).get("containers") or []
    return (",".join(c.get("name", "") for c in containers),
            ",".join(c.get("image", "") for c in containers))


def _daemonset(ds: dict[str, Any], now: datetime) -> Cells:
    st, spec = ds.get("status") or {}, ds.get("spec") or {}
    node_selector = ((spec.get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
    names, images = _containers(spec.get("template") or {})
    return [ds["metadata"]["name"], st.get("desiredNumberScheduled", 0), st.get("currentNumberScheduled", 0),
            st.get("numberReady", 0), st.get("updatedNumberScheduled", 0), st.get("numberAvailable", 0),
            ",".join(f"{k}={v}" for k, v in sorted(node_selector.items())) or "<none>",
            age(ds["metadata"].get("creationTimestamp"), now), names, images,
            selector_string(spec.get("selector"))]


def _replicaset(rs: dict[str, Any], now: datetime) -> Cells:
    st, spec = rs.get("status") or {}, rs.get("spec") or {}
    names, images = _containers(spec.get("template") or {})
    return [rs["metadata"]["name"], spec.get("replicas", 0), st.get("replicas", 0), st.get("readyReplicas", 0),
            age(rs["metadata"].get("creationTimestamp"), now), names, images,
            selector_string(spec.get("selector"))]


def _revision(cr: dict[str, Any], now: datetime) -> Cells:
    owner = next((o for o in cr["metadata"].get("ownerReferences") or [] if o.get("controller")), None)
    controller = "<none>"
    if owner:
        group = owner.get("apiVersion", "").split("/")[0] if "/" in owner.get("apiVersion", "") else ""
        kind = owner.get("kind", "").lower() + (f".{group}" if group else "")
        controller = f"{kind}/{owner.get('name', '')}"
    return [cr["metadata"]["name"], controller, cr.get("revision", 0),
            age(cr["metadata"].get("creationTimestamp"), now)]


def _event(ev: dict[str, Any], now: datetime) -> Cells:
    # printEvent: the legacy timestamps, else the new API's eventTime (and series)
    inv = ev.get("involvedObject") or {}
    last = ev.get("lastTimestamp") or ev.get("eventTime")
    first = ev.get("firstTimestamp") or ev.get("eventTime")
    count = ev.get("count") or 1  # singleton events of the new API have no count
    series = ev.get("series")
    if isinstance(series, dict):
        last, count = series.get("lastObservedTime") or last, series.get("count") or count
    src = ev.get("source") or {}
    component = src.get("component") or ev.get("reportingComponent") or ""
    instance = src.get("host") or ev.get("reportingInstance") or ""
    source = f"{component}, {instance}" if instance else component
    return [age(last, now), ev.get("type", ""), ev.get("reason", ""),
            f"{inv.get('kind', '').lower()}/{inv.get('name', '')}", ev.get("message", ""), source,
            inv.get("fieldPath", ""), age(first, now), count, ev["metadata"]["name"]]


def _namespace(ns: dict[str, Any], now: datetime) -> Cells:
    return [ns["metadata"]["name"], (ns.get("status") or {}).get("phase", "Active"),
            age(ns["metadata"].get("creationTimestamp"), now)]


_PRINTERS: dict[ApiResource, tuple[list[Column], Callable[[dict[str, Any], datetime], Cells]]] = {
    R.PODS: ([NAME, _col("Ready"), _col("Status"), _col("Restarts", "string"), AGE,
              _col("IP", priority=1), _col("Node", priority=1), _col("Nominated Node", priority=1),
              _col("Readiness Gates", priority=1)], _pod),
    R.NODES: ([NAME, _col("Status"), _col("Roles"), AGE, _col("Version"), _col("Internal-IP", priority=1),
               _col("External-IP", priority=1), _col("OS-Image", priority=1),
               _col("Kernel-Version", priority=1), _col("Container-Runtime", priority=1)], _node),
    R.DAEMONSETS: ([NAME, _col("Desired", "integer"), _col("Current", "integer"), _col("Ready", "integer"),
                    _col("Up-to-date", "integer"), _col("Available", "integer"), _col("Node Selector"), AGE,
                    _col("Containers", priority=1), _col("Images", priority=1),
                    _col("Selector", priority=1)], _daemonset),
    R.REPLICASETS: ([NAME, _col("Desired", "integer"), _col("Current", "integer"), _col("Ready", "integer"),
                     AGE, _col("Containers", priority=1), _col("Images", priority=1),
                     _col("Selector", priority=1)], _replicaset),
    R.CONTROLLERREVISIONS: ([NAME, _col("Controller"), _col("Revision", "integer"), AGE], _revision),
    R.EVENTS: ([_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Message"),
                _col("Source", priority=1), _col("Subobject", priority=1), _col("First Seen", priority=1),
                _col("Count", "integer", priority=1), _col("Name", priority=1)], _event),
    R.NAMESPACES: ([NAME, _col("Status"), AGE], _namespace),
}


def _role_binding(obj: dict[str, Any], now: datetime) -> Cells:
    ref = obj.get("roleRef") or {}
    return [obj["metadata"]["name"], f'{ref.get("kind", "")}/{ref.get("name", "")}',
            age(obj["metadata"].get("creationTimestamp"), now)]


def _created_at(obj: dict[str, Any], now: datetime) -> Cells:
    return [obj["metadata"]["name"], obj["metadata"].get("creationTimestamp", "")]


def _service_account(obj: dict[str, Any], now: datetime) -> Cells:
    return [obj["metadata"]["name"], len(obj.get("secrets") or ()), age(obj["metadata"].get("creationTimestamp"), now)]


_BINDING_COLUMNS = [NAME, _col("Role"), AGE, _col("Users", priority=1), _col("Groups", priority=1),
                    _col("ServiceAccounts", priority=1)]


def _role_binding_wide(obj: dict[str, Any], now: datetime) -> Cells:
    subjects = [s for s in obj.get("subjects") or () if isinstance(s, dict)]

    def of(kind: str) -> str:
        return ", ".join((f'{s.get("namespace", "")}/{s.get("name", "")}' if kind == "ServiceAccount"
                          else str(s.get("name", ""))) for s in subjects if s.get("kind") == kind)
    return [*_role_binding(obj, now), of("User"), of("Group"), of("ServiceAccount")]


_PRINTERS.update({
    R.SERVICEACCOUNTS: ([NAME, _col("Secrets", "string"), AGE], _service_account),
    R.ROLES: ([NAME, _col("Created At", fmt="date")], _created_at),
    R.CLUSTERROLES: ([NAME, _col("Created At", fmt="date")], _created_at),
    R.ROLEBINDINGS: (_BINDING_COLUMNS, _role_binding_wide),
    R.CLUSTERROLEBINDINGS: (_BINDING_COLUMNS, _role_binding_wide),
})


def _partial(obj: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


def table(resource: ApiResource, objects: list[dict[str, Any]], now: datetime, *, include_object: str,
          list_meta: dict[str, Any] | None = None, columns: bool = True) -> dict[str, Any]:
    column_defs, printer = _PRINTERS[resource]
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": printer(obj, now)}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = _partial(obj)
        rows.append(row)
    result: dict[str, Any] = {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
                              "metadata": list_meta or {}}
    if columns:
        result["columnDefinitions"] = column_defs
    result["rows"] = rows
    return result
