"""Discovery documents: /version, /api, /apis, the group-version resource lists and OpenAPI stubs.

kubectl maps `kubectl get ds` to a REST path through these lists (names, short names, verbs,
categories), so they carry the same fields kube-apiserver serves. The OpenAPI documents are
deliberately empty of schemas: kubectl then skips client-side schema validation (it does so for
any type it has no schema for) and computes strategic merge patches from its compiled-in types.
"""

from __future__ import annotations

import platform
from typing import Any

from sim import resources as R
from sim.resources import ApiResource

SIM_VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-kubus-sim",
               "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
               "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23.0", "compiler": "gc",
               "platform": f"linux/{'arm64' if platform.machine() == 'aarch64' else 'amd64'}"}


def _group_version(group: str) -> str:
    version = R.AUTH_GROUP_VERSIONS[group]
    return f"{group}/{version}" if group else version


def api_versions(server_address: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def _group(group: str) -> dict[str, Any]:
    gv = {"groupVersion": _group_version(group), "version": R.AUTH_GROUP_VERSIONS[group]}
    return {"name": group, "versions": [gv], "preferredVersion": gv}


def api_group_list(authz: bool = False) -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [_group(g) for g in R.group_versions(authz) if g]}


def api_group(group: str) -> dict[str, Any]:
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(group)}


def _resource_entry(r: ApiResource) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
                             "kind": r.kind, "verbs": list(r.verbs)}
    if r.short_names:
        entry["shortNames"] = list(r.short_names)
    if r.categories:
        entry["categories"] = list(r.categories)
    return entry


def _subresource_entries(r: ApiResource) -> list[dict[str, Any]]:
    out = []
    for sub in r.subresources:
        if sub == "scale":
            out.append({"name": f"{r.plural}/scale", "singularName": "", "namespaced": r.namespaced,
                        "group": "autoscaling", "version": "v1", "kind": "Scale",
                        "verbs": ["get", "patch", "update"]})
        elif sub == "status":
            out.append({"name": f"{r.plural}/status", "singularName": "", "namespaced": r.namespaced,
                        "kind": r.kind, "verbs": ["get", "patch", "update"]})
        elif sub == "token":
            out.append({"name": f"{r.plural}/token", "singularName": "", "namespaced": True,
                        "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest",
                        "verbs": ["create"]})
        elif sub == "binding":
            out.append({"name": f"{r.plural}/binding", "singularName": "", "namespaced": True,
                        "kind": "Binding", "verbs": ["create"]})
    return out


def resource_list(group: str, authz: bool = False) -> dict[str, Any]:
    entries: list[dict[str, Any]] = []
    for r in R.served(authz):
        if r.group == group:
            entries.append(_resource_entry(r))
            entries.extend(_subresource_entries(r))
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": _group_version(group),
            "resources": entries}


def openapi_v2() -> dict[str, Any]:
    return {"swagger": "2.0", "info": {"title": "Kubernetes (kubus sim)", "version": SIM_VERSION["gitVersion"]},
            "paths": {}, "definitions": {}}


def openapi_v2_protobuf() -> bytes:
    """The same empty document in gnostic's protobuf encoding (openapi_v2.Document), which older
    kubectl releases request without offering JSON."""

    def field(number: int, payload: bytes) -> bytes:
        return bytes([(number << 3) | 2]) + _varint(len(payload)) + payload

    info = field(1, b"Kubernetes (kubus sim)") + field(2, SIM_VERSION["gitVersion"].encode())
    return field(1, b"2.0") + field(2, info)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def openapi_v3_root() -> dict[str, Any]:
    return {"paths": {}}
