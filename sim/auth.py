"""Authentication for `kubus sim --authz rbac`: who a request is, and what it asks to do.

Two kinds of credentials are accepted, both as `Authorization: Bearer <token>`:

- the static admin token written into the sim's kubeconfig: user `kubernetes-admin` in group
  `system:masters` (which kube-apiserver lets do anything, before RBAC is asked);
- ServiceAccount tokens minted through the TokenRequest subresource (`kubectl create token SA`): a JWT
  the sim signs with HMAC-SHA256 under a key only it holds, bound to the ServiceAccount's uid (deleting
  the ServiceAccount revokes it, as for kube-apiserver's bound tokens) and valid for the API server's
  audience until it expires.

A request without credentials, or with credentials that do not verify, is answered 401 as a
kube-apiserver started with `--anonymous-auth=false` answers it. ``request_info`` is a port of
apiserver's RequestInfoFactory: the verb, API group, resource, subresource, namespace and name that the
authorizer decides on, derived from the method, the path and the query as kube-apiserver derives them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import msgspec

from sim import resources as R
from sim import status as errors
from sim.registry import format_time
from sim.store import ObjectStore

ADMIN_USER = "kubernetes-admin"
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"
ISSUER = "https://kubernetes.default.svc.cluster.local"
DEFAULT_TOKEN_SECONDS = 3600
MIN_TOKEN_SECONDS = 600  # kube-apiserver refuses shorter TokenRequests
MAX_TOKEN_SECONDS = 48 * 3600


@dataclass(frozen=True)
class UserInfo:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)

    def as_user_info(self) -> dict[str, Any]:
        """authentication.k8s.io/v1 UserInfo, as a SelfSubjectReview reports it."""
        out: dict[str, Any] = {"username": self.name}
        if self.uid:
            out["uid"] = self.uid
        if self.groups:
            out["groups"] = list(self.groups)
        if self.extra:
            out["extra"] = self.extra
        return out


def service_account_user(namespace: str, name: str, uid: str, extra: dict[str, list[str]] | None = None) -> UserInfo:
    return UserInfo(f"system:serviceaccount:{namespace}:{name}", uid,
                    ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED), extra or {})


def unauthorized() -> errors.ApiError:
    """apierrors.NewUnauthorized("Unauthorized"): no details."""
    return errors.ApiError(401, "Unauthorized", "Unauthorized")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Authenticator:
    def __init__(self, store: ObjectStore, admin_token: str | None = None, signing_key: bytes | None = None):
        self.store = store
        self.admin_token = admin_token or secrets.token_urlsafe(32)
        self._key = signing_key or secrets.token_bytes(32)
        self.admin = UserInfo(ADMIN_USER, "", (MASTERS, AUTHENTICATED))

    def authenticate(self, headers: Mapping[str, str], now: datetime) -> UserInfo:
        """The user the request's bearer token names; raises 401 for none or one that does not verify."""
        header = headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise unauthorized()
        if hmac.compare_digest(token.encode(), self.admin_token.encode()):
            return self.admin
        user = self._service_account(token, now)
        if user is None:
            raise unauthorized()
        return user

    # --- ServiceAccount tokens ---------------------------------------------------------------------------
    def mint(self, sa: dict[str, Any], audiences: list[str], seconds: int, now: datetime) -> tuple[str, datetime]:
        meta = sa["metadata"]
        issued = int(now.timestamp())
        expires = issued + seconds
        claims = {"aud": audiences, "exp": expires, "iat": issued, "nbf": issued, "iss": ISSUER,
                  "jti": str(uuid.uuid4()),
                  "kubernetes.io": {"namespace": meta["namespace"],
                                    "serviceaccount": {"name": meta["name"], "uid": meta["uid"]}},
                  "sub": f"system:serviceaccount:{meta['namespace']}:{meta['name']}"}
        head = _b64(msgspec.json.encode({"alg": "HS256", "typ": "JWT"}))
        body = _b64(msgspec.json.encode(claims))
        signature = _b64(hmac.new(self._key, f"{head}.{body}".encode(), hashlib.sha256).digest())
        return f"{head}.{body}.{signature}", now + timedelta(seconds=expires - issued)

    def _service_account(self, token: str, now: datetime) -> UserInfo | None:
        parts = token.split(".")
        if len(parts) != 3:
            return None
        expected = _b64(hmac.new(self._key, f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest())
        if not hmac.compare_digest(expected.encode(), parts[2].encode()):
            return None
        try:
            claims = msgspec.json.decode(_unb64(parts[1]))
            ident = claims["kubernetes.io"]
            namespace, name, uid = ident["namespace"], ident["serviceaccount"]["name"], ident["serviceaccount"]["uid"]
            expires, audiences = int(claims["exp"]), list(claims["aud"])
        except (ValueError, KeyError, TypeError, msgspec.DecodeError):
            return None
        if now.timestamp() >= expires or API_AUDIENCE not in audiences:
            return None
        sa = self.store.get(R.SERVICEACCOUNTS, namespace, name)
        if sa is None or sa.obj["metadata"].get("uid") != uid:  # a bound token dies with its ServiceAccount
            return None
        return service_account_user(namespace, name, uid,
                                    {"authentication.kubernetes.io/credential-id": [f"JTI={claims.get('jti', '')}"]})

    def token_request(self, sa: dict[str, Any], body: Any, now: datetime) -> dict[str, Any]:
        """POST serviceaccounts/NAME/token: a TokenRequest answered with a fresh token."""
        spec = (body or {}).get("spec") or {} if isinstance(body, dict) else {}
        if not isinstance(spec, dict):
            raise errors.bad_request("spec of a TokenRequest must be an object")
        audiences = spec.get("audiences") or [API_AUDIENCE]
        seconds = spec.get("expirationSeconds")
        if seconds is None:
            seconds = DEFAULT_TOKEN_SECONDS
        if not isinstance(seconds, int) or isinstance(seconds, bool):
            raise errors.bad_request("spec.expirationSeconds must be an integer")
        name = sa["metadata"]["name"]
        if seconds < MIN_TOKEN_SECONDS:
            message = "may not specify a duration less than 10 minutes"
            raise errors.ApiError(422, "Invalid", f'TokenRequest.authentication.k8s.io "{name}" is invalid: '
                                                  f"spec.expirationSeconds: Invalid value: {seconds}: {message}",
                                  {"name": name, "group": "authentication.k8s.io", "kind": "TokenRequest",
                                   "causes": [{"reason": "FieldValueInvalid", "field": "spec.expirationSeconds",
                                               "message": f"Invalid value: {seconds}: {message}"}]})
        seconds = min(seconds, MAX_TOKEN_SECONDS)
        token, expiry = self.mint(sa, [str(a) for a in audiences], seconds, now)
        meta = sa["metadata"]
        return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                             "creationTimestamp": format_time(now)},
                "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": None},
                "status": {"token": token, "expirationTimestamp": format_time(expiry)}}


# --- request attributes -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Attributes:
    """authorizer.Attributes: what a request asks to do."""

    user: UserInfo
    verb: str
    is_resource: bool
    path: str = ""
    namespace: str = ""
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""


_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
_METHOD_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch",
                 "DELETE": "delete"}


def request_info(user: UserInfo, method: str, path: str, query: Mapping[str, str]) -> Attributes:
    """apiserver's RequestInfoFactory.NewRequestInfo for the paths the sim serves (no /watch/ or proxy)."""
    parts = [p for p in path.split("/") if p]
    nonresource = Attributes(user, method.lower(), False, path)
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return nonresource
    prefix, parts = parts[0], parts[1:]
    group = ""
    if prefix == "apis":
        if len(parts) < 3:
            return nonresource
        group, parts = parts[0], parts[1:]
    version, parts = parts[0], parts[1:]
    verb = _METHOD_VERBS.get(method, "")
    namespace = ""
    if parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in _NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    resource = parts[0]
    name = parts[1] if len(parts) >= 2 else ""
    subresource = parts[2] if len(parts) >= 3 else ""
    if not name and verb == "get":
        verb = "watch" if query.get("watch") in ("true", "1") else "list"
        for term in (query.get("fieldSelector") or "").split(","):
            key, sep, value = term.partition("=")
            value = value[1:] if value.startswith("=") else value  # `==` is `=`
            if key.strip() == "metadata.name" and sep and value.strip() and "/" not in value:
                name = value.strip()
    if not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(user, verb, True, path, namespace, group, version, resource, subresource, name)
