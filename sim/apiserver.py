"""The HTTP face of the simulated cluster: Kubernetes REST paths, verbs and content negotiation."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections import OrderedDict
from typing import Any

import msgspec
import yaml
from aiohttp import web

from sim import discovery, patching, rbac, tables, watching
from sim import resources as R
from sim import status as errors
from sim.auth import Authenticator, UserInfo, request_info
from sim.faults import AppliedThenTimeout, FaultInjector
from sim.registry import PATCH_APPLY, Decoding, Registry, format_time
from sim.resources import ApiResource
from sim.selection import build_filter
from sim.store import Entry

log = logging.getLogger("kubus.sim.api")

_encode = msgspec.json.encode
_decode = msgspec.json.decode
JSON = "application/json"
PROTOBUF = "application/vnd.kubernetes.protobuf"
_SNAPSHOT_TTL = 300.0
_SNAPSHOTS_KEPT = 64


def _json(body: Any, status: int = 200) -> web.Response:
    data = body if isinstance(body, bytes) else _encode(body)
    return web.Response(body=data, status=status, content_type=JSON)


def _error(exc: errors.ApiError) -> web.Response:
    response = _json(exc.status(), exc.code)
    # as kube-apiserver's responsewriters.ErrorNegotiated: the header clients wait on (client-go retries
    # a 429 or 5xx only when it is there)
    wait = (exc.details or {}).get("retryAfterSeconds")
    if isinstance(wait, int) and wait > 0:
        response.headers["Retry-After"] = str(wait)
    return response


class Route:
    """A parsed resource path: /api/v1/namespaces/ns/pods/name/status and friends."""

    __slots__ = ("name", "namespace", "resource", "subresource")

    def __init__(self, resource: ApiResource, namespace: str | None, name: str | None, subresource: str | None):
        self.resource, self.namespace, self.name, self.subresource = resource, namespace, name, subresource

    @property
    def ns(self) -> str:
        return self.namespace or ""


def parse_route(group: str, version: str, rest: list[str], authz: bool = False) -> Route | None:
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        candidate = R.lookup(group, version, rest[2], authz)
        if candidate is not None and candidate.namespaced:
            namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    resource = R.lookup(group, version, rest[0], authz)
    if resource is None:
        return None
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if sub is not None and sub not in resource.subresources:
        return None
    if resource.namespaced and name is not None and namespace is None:
        return None
    return Route(resource, namespace, name, sub)


class ApiServer:
    def __init__(self, registry: Registry, faults: FaultInjector, *, bookmark_interval: float = 60.0,
                 authenticator: Authenticator | None = None):
        """With an ``authenticator`` (`--authz rbac`) every request is authenticated and authorized with
        RBAC, and ServiceAccounts, the RBAC kinds and the self-reviews are served; without, nothing is
        asked of a request and those kinds do not exist."""
        self.authenticator = authenticator
        self.authorizer = rbac.Authorizer(registry.store) if authenticator is not None else None
        self.rbac = authenticator is not None
        self.registry = registry
        self.store = registry.store
        self.faults = faults
        self.bookmark_interval = bookmark_interval
        self.stopping = asyncio.Event()
        self.address = "127.0.0.1:0"
        self._snapshots: OrderedDict[str, tuple[float, int, list[Entry]]] = OrderedDict()
        self._snapshot_seq = 0

    # --- dispatch -----------------------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            if self.authenticator is not None and self.authorizer is not None:
                # kube-apiserver's filter chain: authentication, then authorization, then the handler
                user = self.authenticator.authenticate(request.headers, self.registry.clock())
                user = self.authorizer.impersonate(user, request.headers)
                self.authorizer.check(request_info(user, request.method, request.path, request.query))
                request["kubus.sim.user"] = user
            return await self._dispatch(request)
        except errors.ApiError as exc:
            return _error(exc)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:  # a bug in the sim must not take the server down
            log.exception("internal error serving %s %s", request.method, request.path_qs)
            return _error(errors.internal(f"{type(exc).__name__}: {exc}"))

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        versions = R.group_versions(self.rbac)
        if not parts:
            groups = [p for g, v in versions.items() if g for p in (f"/apis/{g}", f"/apis/{g}/{v}")]
            return _json({"paths": ["/api", "/api/v1", "/apis", *groups, "/healthz",
                                    "/livez", "/openapi/v2", "/openapi/v3", "/readyz", "/version"]})
        head = parts[0]
        if head in ("healthz", "livez", "readyz"):
            return web.Response(text="ok")
        if head == "version":
            return _json(discovery.SIM_VERSION)
        if head == "openapi":
            return self._openapi(request, parts)
        if head == "api":
            if len(parts) == 1:
                return _json(discovery.api_versions(self.address))
            group, version, rest = "", parts[1], parts[2:]
        elif head == "apis":
            if len(parts) == 1:
                return _json(discovery.api_group_list(self.rbac))
            if parts[1] not in versions or not parts[1]:
                raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
            if len(parts) == 2:
                return _json(discovery.api_group(parts[1]))
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        if versions.get(group) != version:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            return _json(discovery.resource_list(group, self.rbac))
        route = parse_route(group, version, rest, self.rbac)
        if route is None:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        if route.resource in R.REVIEWS:
            return await self._review(request, route)
        verb = self._verb(request, route)

        async def name() -> str:
            return route.name or (self.registry.name_for_create(route.resource, route.ns, await self._body(request))
                                  if verb == "create" else "")

        try:
            await self.faults.intercept(route.resource, verb, route.subresource, name)
        except AppliedThenTimeout:
            await getattr(self, f"_{verb}")(request, route)
            await asyncio.sleep(self.faults.timeout_seconds)
            raise errors.timeout("Timeout: request did not complete within requested timeout - context "
                                 "deadline exceeded") from None
        return await getattr(self, f"_{verb}")(request, route)

    @staticmethod
    def _verb(request: web.Request, route: Route) -> str:
        method = request.method
        if method == "GET":
            if route.name is not None:
                return "get"
            return "watch" if request.query.get("watch") in ("true", "1") else "list"
        if method == "POST":
            if route.subresource == "binding":
                return "bind"
            if route.subresource == "token":
                return "token"
            if route.name is None:
                return "create"
        if method == "PUT" and route.name is not None:
            return "update"
        if method == "PATCH" and route.name is not None:
            return "patch"
        if method == "DELETE":
            return "delete" if route.name is not None else "deletecollection"
        raise errors.method_not_allowed("the server does not allow this method on the requested resource")

    def _openapi(self, request: web.Request, parts: list[str]) -> web.Response:
        if parts[1:2] == ["v2"]:
            if "protobuf" in request.headers.get("Accept", ""):
                return web.Response(body=discovery.openapi_v2_protobuf(),
                                    content_type="application/com.github.proto-openapi.spec.v2.v1.0+protobuf")
            return _json(discovery.openapi_v2())
        if parts[1:2] == ["v3"] and len(parts) == 2:
            return _json(discovery.openapi_v3_root())
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")

    # --- bodies and output ----------------------------------------------------------------------
    @staticmethod
    def _content_type(request: web.Request) -> str:
        # kube-apiserver reads a request without Content-Type as JSON, and some clients send none
        return request.content_type if "Content-Type" in request.headers else JSON

    @staticmethod
    def _json_body(request: web.Request) -> bool:
        """Whether _body decodes the request's body from JSON (not protobuf, not YAML)."""
        ctype = ApiServer._content_type(request)
        return ctype != PROTOBUF and not ctype.endswith("yaml")

    @staticmethod
    async def _body(request: web.Request) -> Any:
        data = await request.read()
        ctype = ApiServer._content_type(request)
        if not data:
            return None
        if ctype == PROTOBUF:
            return _protobuf_body(data)
        if ctype.endswith("yaml"):
            try:
                return yaml.safe_load(data)
            except yaml.YAMLError as exc:
                raise errors.bad_request(f"error converting YAML to JSON: {exc}") from exc
        if ctype and "json" not in ctype:
            raise errors.unsupported_media_type(ctype)
        try:
            return _decode(data)
        except msgspec.DecodeError as exc:
            raise errors.bad_request(f"couldn't get version/kind; json parse error: {exc}") from exc

    @staticmethod
    def _wants_table(request: web.Request) -> bool:
        accept = request.headers.get("Accept", "")
        first = accept.split(",")[0]
        return "as=Table" in first

    def _object_response(self, request: web.Request, route: Route, entry: Entry,
                         status: int = 200) -> web.Response:
        if self._wants_table(request):
            return _json(self._table(request, route.resource, [entry.obj], None), status)
        return _json(entry.raw, status)

    def _table(self, request: web.Request, resource: ApiResource, objs: list[dict[str, Any]],
               list_meta: dict[str, Any] | None, columns: bool = True) -> dict[str, Any]:
        return tables.table(resource, objs, self.registry.clock(),
                            include_object=request.query.get("includeObject", "Metadata"),
                            list_meta=list_meta, columns=columns)

    # --- verbs --------------------------------------------------------------------------------
    async def _get(self, request: web.Request, route: Route) -> web.Response:
        assert route.name is not None
        entry = self.registry.get(route.resource, route.ns, route.name)
        if route.subresource == "scale":
            return _json(self._scale(entry))
        return self._object_response(request, route, entry)

    async def _list(self, request: web.Request, route: Route) -> web.Response:
        q = request.query
        flt = build_filter(route.resource, route.namespace, q.get("labelSelector"), q.get("fieldSelector"))
        await self._wait_for_rv(q.get("resourceVersion"))
        token = q.get("continue")
        if token:
            list_rv, start, items = self._resume(token)
        else:
            list_rv, start = self.store.rv, 0
            items = [e for e in self.store.iter(route.resource, flt.namespace)
                     if flt.trivial or flt.matches(e.obj)]
        limit = _int_param(q.get("limit"), "limit") or 0
        meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
        page = items[start:]
        if limit > 0 and len(page) > limit:
            page = page[:limit]
            meta["continue"] = self._remember(list_rv, start + limit, items)
            meta["remainingItemCount"] = len(items) - start - limit
        if self._wants_table(request):
            return _json(self._table(request, route.resource, [e.obj for e in page], meta))
        head = _encode({"kind": f"{route.resource.kind}List", "apiVersion": route.resource.api_version,
                        "metadata": meta})
        body = head[:-1] + b',"items":[' + b",".join(e.raw for e in page) + b"]}"
        return _json(body)

    async def _wait_for_rv(self, rv: str | None) -> None:
        if not rv or rv == "0":
            return
        wanted = _int_param(rv, "resourceVersion") or 0
        if wanted <= self.store.rv:
            return
        try:
            await asyncio.wait_for(self.store.wait_past(wanted - 1), timeout=3.0)
        except TimeoutError:
            raise errors.ApiError(504, "Timeout", f"Too large resource version: {wanted}, current: "
                                                  f"{self.store.rv}",
                                  {"causes": [{"reason": "ResourceVersionTooLarge",
                                               "message": "Too large resource version"}],
                                   "retryAfterSeconds": 1}) from None

    def _remember(self, rv: int, start: int, items: list[Entry]) -> str:
        now = time.monotonic()
        while self._snapshots:
            key, (created, _, _) = next(iter(self._snapshots.items()))
            if now - created < _SNAPSHOT_TTL and len(self._snapshots) < _SNAPSHOTS_KEPT:
                break
            del self._snapshots[key]
        self._snapshot_seq += 1
        sid = str(self._snapshot_seq)
        self._snapshots[sid] = (now, rv, items)
        raw = _encode({"v": "meta.k8s.io/v1", "rv": rv, "start": start, "id": sid})
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def _resume(self, token: str) -> tuple[int, int, list[Entry]]:
        try:
            decoded = _decode(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            sid, start = str(decoded["id"]), int(decoded["start"])
        except Exception:
            raise errors.bad_request("continue key is not valid: could not decode the token") from None
        snapshot = self._snapshots.get(sid)
        if snapshot is None:
            raise errors.gone("The provided continue parameter is too old to display a consistent list "
                              "result. You can start a new list without the continue parameter.")
        return snapshot[1], start, snapshot[2]

    async def _watch(self, request: web.Request, route: Route) -> web.StreamResponse:
        q = request.query
        flt = build_filter(route.resource, route.namespace, q.get("labelSelector"), q.get("fieldSelector"))
        if route.name is not None:
            flt = build_filter(route.resource, route.namespace, q.get("labelSelector"),
                               ",".join(filter(None, [q.get("fieldSelector"), f"metadata.name={route.name}"])))
        timeout = _int_param(q.get("timeoutSeconds"), "timeoutSeconds")
        initial = q.get("sendInitialEvents")
        req = watching.WatchRequest(
            route.resource, flt, q.get("resourceVersion"), float(timeout) if timeout else None,
            q.get("allowWatchBookmarks") in ("true", "1"),
            None if initial is None else initial == "true", self.bookmark_interval)
        framer = watching.json_frame
        if self._wants_table(request):
            framer = self._table_framer(request, route.resource)
        return await watching.serve_watch(request, self.store, req, framer, self.stopping)

    def _table_framer(self, request: web.Request, resource: ApiResource) -> watching.Framer:
        sent_columns = False

        def frame(event_type: str, obj: dict[str, Any], raw: bytes) -> bytes:
            nonlocal sent_columns
            table = self._table(request, resource, [obj], {"resourceVersion": obj["metadata"].get(
                "resourceVersion", "")}, columns=not sent_columns)
            sent_columns = True
            return _encode({"type": event_type, "object": table}) + b"\n"

        return frame

    @staticmethod
    def _decoding(request: web.Request) -> Decoding:
        mode = request.query.get("fieldValidation", "Warn")
        if mode not in ("Strict", "Warn", "Ignore"):
            raise errors.bad_request(f'fieldValidation: Unsupported value: "{mode}": supported values: '
                                     '"Ignore", "Strict", "Warn"')
        return Decoding(mode)

    @staticmethod
    def _warn(response: web.Response, decoding: Decoding) -> web.Response:
        """kube-apiserver's `Warning` headers, which kubectl prints as `Warning: ...`."""
        for text in decoding.warnings:
            response.headers.add("Warning", '299 - "' + text.replace('"', '\\"') + '"')
        return response

    async def _create(self, request: web.Request, route: Route) -> web.Response:
        body = await self._body(request)
        decoding = self._decoding(request)
        decoding.from_json = self._json_body(request)
        with self._dry_run(request, "CreateOptions"):
            entry = self.registry.create(route.resource, route.ns, body, decoding)
        return self._warn(self._object_response(request, route, entry, 201), decoding)

    async def _update(self, request: web.Request, route: Route) -> web.Response:
        assert route.name is not None
        body = await self._body(request)
        with self._dry_run(request, "UpdateOptions"):
            if route.subresource == "scale":
                return _json(self._update_scale(route, body))
            decoding = self._decoding(request)
            entry = self.registry.update(route.resource, route.ns, route.name, body, route.subresource, decoding)
        return self._warn(self._object_response(request, route, entry), decoding)

    async def _patch(self, request: web.Request, route: Route) -> web.Response:
        assert route.name is not None
        body = await self._body(request)
        ptype = request.content_type if "Content-Type" in request.headers else ""
        if ptype == PATCH_APPLY:
            raise errors.ApiError(415, "UnsupportedMediaType",
                                  "server-side apply is not supported by the kubus sim; use client-side "
                                  "`kubectl apply` (the default)")
        if route.subresource == "scale":
            current = self._scale(self.registry.get(route.resource, route.ns, route.name))
            try:
                if ptype == "application/json-patch+json":
                    scale = patching.apply_json_patch(current, body)
                else:
                    scale = patching.apply_merge_patch(current, body)
            except patching.PatchError as exc:
                raise errors.ApiError(422, "Invalid", str(exc)) from exc
            with self._dry_run(request, "PatchOptions"):
                return _json(self._update_scale(route, scale))
        decoding = self._decoding(request)
        with self._dry_run(request, "PatchOptions"):
            entry = self.registry.patch(route.resource, route.ns, route.name, ptype, body, route.subresource,
                                        decoding)
        return self._warn(self._object_response(request, route, entry), decoding)

    async def _delete(self, request: web.Request, route: Route) -> web.Response:
        assert route.name is not None
        options = await self._delete_options(request)
        with self._dry_run(request, "DeleteOptions", options):
            entry = self.registry.delete(route.resource, route.ns, route.name, options)
        if route.resource is R.PODS or entry.obj["metadata"].get("deletionTimestamp"):
            return self._object_response(request, route, entry)
        details: dict[str, Any] = {"name": route.name, "kind": route.resource.plural,
                                   "uid": entry.obj["metadata"].get("uid")}
        if route.resource.group:
            details["group"] = route.resource.group
        return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                      "details": details})

    async def _delete_options(self, request: web.Request) -> dict[str, Any]:
        """DeleteOptions from the body, overridden by the query parameters a client may use instead."""
        options = await self._body(request) or {}
        if not isinstance(options, dict):
            raise errors.bad_request("the body of a delete must be a DeleteOptions object")
        q = request.query
        if "gracePeriodSeconds" in q:
            options["gracePeriodSeconds"] = _int_param(q["gracePeriodSeconds"], "gracePeriodSeconds")
        if "propagationPolicy" in q:
            options["propagationPolicy"] = q["propagationPolicy"]
        if "orphanDependents" in q:
            options["orphanDependents"] = q["orphanDependents"] in ("true", "1")
        return options

    async def _deletecollection(self, request: web.Request, route: Route) -> web.Response:
        q = request.query
        options = await self._delete_options(request)
        flt = build_filter(route.resource, route.namespace, q.get("labelSelector"), q.get("fieldSelector"))
        victims = [e for e in self.store.iter(route.resource, flt.namespace) if flt.matches(e.obj)]
        with self._dry_run(request, "DeleteOptions", options):
            for entry in victims:
                meta = entry.obj["metadata"]
                try:
                    self.registry.delete(route.resource, meta.get("namespace", ""), meta["name"], dict(options))
                except errors.ApiError as exc:
                    if exc.code != 404:
                        raise
        head = _encode({"kind": f"{route.resource.kind}List", "apiVersion": route.resource.api_version,
                        "metadata": {"resourceVersion": str(self.store.rv)}})
        return _json(head[:-1] + b',"items":[' + b",".join(e.raw for e in victims) + b"]}")

    async def _bind(self, request: web.Request, route: Route) -> web.Response:
        assert route.name is not None
        body = await self._body(request) or {}
        target = (body.get("target") or {}).get("name")
        if not target:
            raise errors.ApiError(422, "Invalid", f'Binding "{route.name}" is invalid: target.name: '
                                                  "Required value")
        with self._dry_run(request, "CreateOptions"):
            bind_pod(self.registry, route.ns, route.name, target)
        return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
                     201)

    def _dry_run(self, request: web.Request, options_kind: str,
                 options: dict[str, Any] | None = None) -> contextlib.AbstractContextManager[None]:
        """The store's dry-run mode when the request asks for `dryRun=All` (query or DeleteOptions)."""
        values = request.query.getall("dryRun", [])
        body_values = (options or {}).get("dryRun") or []
        values += body_values if isinstance(body_values, list) else [body_values]
        if not values:
            return contextlib.nullcontext()
        if any(v != "All" for v in values):
            shown = "[]string{" + ", ".join(_encode(str(v)).decode() for v in values) + "}"
            body = f'Unsupported value: {shown}: supported values: "All"'
            raise errors.ApiError(422, "Invalid", f'{options_kind}.meta.k8s.io "" is invalid: dryRun: {body}',
                                  {"name": "", "group": "meta.k8s.io", "kind": options_kind,
                                   "causes": [{"reason": "FieldValueNotSupported", "message": body,
                                               "field": "dryRun"}]})
        return self.store.dry_run()

    # --- identities -----------------------------------------------------------------------------
    async def _token(self, request: web.Request, route: Route) -> web.Response:
        """POST serviceaccounts/NAME/token (TokenRequest): `kubectl create token NAME`."""
        assert route.name is not None and self.authenticator is not None
        sa = self.registry.get(R.SERVICEACCOUNTS, route.ns, route.name)
        body = await self._body(request)
        answer = self.authenticator.token_request(sa.obj, body, self.registry.clock())
        return _json(answer, 201)

    async def _review(self, request: web.Request, route: Route) -> web.Response:
        """SelfSubjectAccessReview (`kubectl auth can-i`) and SelfSubjectReview (`kubectl auth whoami`):
        answered by the authenticator and authorizer every request goes through, never stored."""
        if request.method != "POST" or route.name is not None:
            raise errors.method_not_allowed("the server does not allow this method on the requested resource")
        assert self.authorizer is not None
        user: UserInfo = request["kubus.sim.user"]
        body = await self._body(request) or {}
        if not isinstance(body, dict):
            raise errors.bad_request(f"the body of a {route.resource.kind} must be an object")
        if route.resource is R.SELFSUBJECTREVIEWS:
            return _json({"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
                          "metadata": {"creationTimestamp": None}, "status": {"userInfo": user.as_user_info()}},
                         201)
        spec = body.get("spec") or {}
        if route.resource is R.SELFSUBJECTRULESREVIEWS:
            namespace = spec.get("namespace") if isinstance(spec, dict) else None
            return _json(self.authorizer.rules_review(user, namespace if isinstance(namespace, str) else ""), 201)
        attrs = rbac.review_attributes(user, spec)
        return _json(rbac.review(attrs, self.authorizer.authorize(attrs), spec), 201)

    # --- scale subresource --------------------------------------------------------------------
    @staticmethod
    def _scale(entry: Entry) -> dict[str, Any]:
        obj = entry.obj
        meta = obj["metadata"]
        selector = ((obj.get("spec") or {}).get("selector") or {})
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                                  "creationTimestamp") if k in meta},
                "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
                "status": {"replicas": (obj.get("status") or {}).get("replicas", 0),
                           "selector": tables.selector_string(selector).replace("<none>", "")}}

    def _update_scale(self, route: Route, scale: Any) -> dict[str, Any]:
        assert route.name is not None
        if not isinstance(scale, dict):
            raise errors.bad_request("the body must be a Scale object")
        replicas = (scale.get("spec") or {}).get("replicas", 0)
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise errors.ApiError(422, "Invalid", f'Scale.autoscaling "{route.name}" is invalid: spec.replicas: '
                                                  f"Invalid value: {replicas}: must be greater than or equal to 0",
                                  {"name": route.name, "group": "autoscaling", "kind": "Scale",
                                   "causes": [{"reason": "FieldValueInvalid", "field": "spec.replicas",
                                               "message": "Invalid value: must be greater than or equal to 0"}]})
        current = self.registry.get(route.resource, route.ns, route.name)
        rv = (scale.get("metadata") or {}).get("resourceVersion")
        if rv and rv != str(current.rv):
            raise errors.stale_object(route.resource, route.name)
        obj = current.clone()
        obj["spec"]["replicas"] = replicas
        entry = self.registry.update(route.resource, route.ns, route.name, obj)
        return self._scale(entry)


def bind_pod(registry: Registry, namespace: str, name: str, node: str) -> Entry:
    """POST pods/binding: what the scheduler does once it has chosen a node."""
    current = registry.get(R.PODS, namespace, name)
    if current.obj["metadata"].get("deletionTimestamp"):
        raise errors.conflict(R.PODS, name, "pod is being deleted, cannot be assigned to a host")
    assigned = current.obj.get("spec", {}).get("nodeName")
    if assigned:
        raise errors.conflict(R.PODS, name, f"pod {name} is already assigned to node \"{assigned}\"")
    pod = current.shallow()  # the spec and status replaced below, not changed: the stored pod's are shared
    pod["spec"] = {**pod["spec"], "nodeName": node}
    status = dict(pod.setdefault("status", {}))
    conditions = [c for c in status.get("conditions", []) if c.get("type") != "PodScheduled"]
    conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                       "lastTransitionTime": format_time(registry.clock())})
    status["conditions"] = conditions
    pod["status"] = status
    return registry.store.put(R.PODS, pod, "MODIFIED", current.obj)


def _protobuf_fields(data: bytes) -> list[tuple[int, Any]]:
    """(field number, value) pairs of one protobuf message: ints for varints, bytes otherwise."""
    fields: list[tuple[int, Any]] = []
    i = 0

    def varint() -> int:
        nonlocal i
        value = shift = 0
        while True:
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while i < len(data):
        key = varint()
        wire = key & 7
        if wire == 0:
            fields.append((key >> 3, varint()))
        elif wire == 2:
            size = varint()
            fields.append((key >> 3, data[i:i + size]))
            i += size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            fields.append((key >> 3, data[i:i + size]))
            i += size
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
    return fields


def _protobuf_body(data: bytes) -> dict[str, Any]:
    """A body sent as `application/vnd.kubernetes.protobuf`, as kubectl's typed clients send them.

    Only what kubectl sends that way to the kinds the sim serves is understood: the Namespace of
    `kubectl create namespace`, the DeleteOptions of `kubectl drain`, the ServiceAccount of
    `kubectl create serviceaccount`, the TokenRequest of `kubectl create token` and the reviews of
    `kubectl auth can-i` and `kubectl auth whoami`; anything else is 415.
    """
    try:
        if not data.startswith(b"k8s\x00"):
            raise ValueError("missing the k8s protobuf envelope")
        unknown = dict(_protobuf_fields(data[4:]))  # runtime.Unknown: 1 typeMeta, 2 raw
        type_meta = dict(_protobuf_fields(unknown.get(1, b"")))
        kind = type_meta.get(2, b"").decode()
        decode = {"Namespace": _protobuf_namespace, "DeleteOptions": _protobuf_delete_options,
                  "ServiceAccount": _protobuf_service_account, "TokenRequest": _protobuf_token_request,
                  "SelfSubjectAccessReview": _protobuf_access_review,
                  "SelfSubjectRulesReview": _protobuf_rules_review, "SelfSubjectReview": lambda _: {}}.get(kind)
        if decode is None:
            raise errors.unsupported_media_type(PROTOBUF)
        obj = decode(_protobuf_fields(unknown.get(2, b"")))
        return {"apiVersion": type_meta.get(1, b"v1").decode(), "kind": kind, **obj}
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise errors.bad_request(f"unable to decode the protobuf body: {exc}") from exc


def _protobuf_meta(data: bytes) -> dict[str, Any]:
    """ObjectMeta: the fields a create sets (name, generateName, labels, annotations, finalizers)."""
    meta: dict[str, Any] = {}
    for field, item in _protobuf_fields(data):
        if field in (1, 2) and item:
            meta["name" if field == 1 else "generateName"] = item.decode()
        elif field in (11, 12):  # labels, annotations: map entries of key 1, value 2
            entry = dict(_protobuf_fields(item))
            key = "labels" if field == 11 else "annotations"
            meta.setdefault(key, {})[entry.get(1, b"").decode()] = entry.get(2, b"").decode()
        elif field == 14:
            meta.setdefault("finalizers", []).append(item.decode())
    return meta


def _protobuf_service_account(fields: list[tuple[int, Any]]) -> dict[str, Any]:
    """ServiceAccount (`kubectl create serviceaccount`): 1 metadata, 4 automountServiceAccountToken."""
    obj: dict[str, Any] = {"metadata": {}}
    for number, value in fields:
        if number == 1:
            obj["metadata"] = _protobuf_meta(value)
        elif number == 4:
            obj["automountServiceAccountToken"] = bool(value)
    return obj


def _protobuf_namespace(fields: list[tuple[int, Any]]) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    spec_finalizers: list[str] = []
    for number, value in fields:
        if number == 1:  # ObjectMeta
            meta = _protobuf_meta(value)
        elif number == 2:  # NamespaceSpec: 1 finalizers
            spec_finalizers += [v.decode() for f, v in _protobuf_fields(value) if f == 1]
    obj: dict[str, Any] = {"metadata": meta}
    if spec_finalizers:
        obj["spec"] = {"finalizers": spec_finalizers}
    return obj


def _protobuf_token_request(fields: list[tuple[int, Any]]) -> dict[str, Any]:
    """TokenRequest: 2 spec (1 audiences, 4 expirationSeconds); the bound object reference is not kept."""
    spec: dict[str, Any] = {}
    for number, value in fields:
        if number == 2:
            for field, item in _protobuf_fields(value):
                if field == 1:
                    spec.setdefault("audiences", []).append(item.decode())
                elif field == 4:
                    spec["expirationSeconds"] = item
    return {"spec": spec}


_RESOURCE_ATTRIBUTES = {1: "namespace", 2: "verb", 3: "group", 4: "version", 5: "resource", 6: "subresource",
                        7: "name"}


def _protobuf_access_review(fields: list[tuple[int, Any]]) -> dict[str, Any]:
    """SelfSubjectAccessReview: 2 spec (1 resourceAttributes, 2 nonResourceAttributes: 1 path, 2 verb)."""
    spec: dict[str, Any] = {}
    for number, value in fields:
        if number != 2:
            continue
        for field, item in _protobuf_fields(value):
            if field == 1:
                spec["resourceAttributes"] = {_RESOURCE_ATTRIBUTES[f]: v.decode() for f, v in _protobuf_fields(item)
                                              if f in _RESOURCE_ATTRIBUTES}
            elif field == 2:
                spec["nonResourceAttributes"] = {{1: "path", 2: "verb"}[f]: v.decode()
                                                 for f, v in _protobuf_fields(item) if f in (1, 2)}
    return {"spec": spec}


def _protobuf_rules_review(fields: list[tuple[int, Any]]) -> dict[str, Any]:
    """SelfSubjectRulesReview: 2 spec (1 namespace)."""
    spec: dict[str, Any] = {}
    for number, value in fields:
        if number == 2:
            for f, v in _protobuf_fields(value):
                if f == 1:
                    spec["namespace"] = v.decode()
    return {"spec": spec}


def _protobuf_delete_options(fields: list[tuple[int, Any]]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for number, value in fields:
        if number == 1:  # an int64 varint: two's complement when negative
            options["gracePeriodSeconds"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 2:
            pre = dict(_protobuf_fields(value))
            options["preconditions"] = {k: pre[n].decode() for n, k in ((1, "uid"), (2, "resourceVersion"))
                                        if n in pre}
        elif number == 3:
            options["orphanDependents"] = bool(value)
        elif number == 4:
            options["propagationPolicy"] = value.decode()
        elif number == 5:
            options.setdefault("dryRun", []).append(value.decode())
    return options


def _int_param(value: str | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise errors.bad_request(f"invalid value for {name}: {value!r} is not an integer") from None
