"""`Status` error objects, shaped and worded as kube-apiserver returns them.

Clients branch on `code` and `reason` (client-go's `errors.IsNotFound`, the Python client's
`ApiException.status`), so each constructor mirrors one of apimachinery's `errors.New*` helpers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sim.resources import ApiResource
from sim.validation import ApiFieldError, format_invalid_message


class ApiError(Exception):
    """An error the server answers with a `Status` body."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(resource: ApiResource, name: str, **extra: Any) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": resource.plural}
    if resource.group:
        details["group"] = resource.group
    details.update(extra)
    return details


def not_found(resource: ApiResource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{resource.group_resource} "{name}" not found',
                    _details(resource, name))


def already_exists(resource: ApiResource, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{resource.group_resource} "{name}" already exists',
                    _details(resource, name))


def conflict(resource: ApiResource, name: str, why: str) -> ApiError:
    return ApiError(
        409, "Conflict",
        f'Operation cannot be fulfilled on {resource.group_resource} "{name}": {why}',
        _details(resource, name),
    )


def stale_object(resource: ApiResource, name: str) -> ApiError:
    return conflict(resource, name, "the object has been modified; please apply your changes "
                                    "to the latest version and try again")



def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed(message: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", f'the body of the request was in an unknown format - '
                                                  f'accepted media types include: application/json, '
                                                  f'application/yaml (got "{content_type}")')


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def too_many_requests() -> ApiError:
    return ApiError(429, "TooManyRequests", "Too many requests, please try again later.",
                    {"retryAfterSeconds": 1})


def internal(message: str) -> ApiError:
    return ApiError(500, "InternalError", f"Internal error occurred: {message}",
                    {"causes": [{"message": message}]})


def timeout(message: str) -> ApiError:
    return ApiError(504, "Timeout", message, {"retryAfterSeconds": 1})



def quota_resource_name(resource: ApiResource) -> str:
    """The quota's name for a count of this resource: `pods`, or `count/replicasets.apps`."""
    return "pods" if resource.plural == "pods" and not resource.group else f"count/{resource.group_resource}"


def forbidden(resource: ApiResource, name: str, why: str) -> ApiError:
    """errors.NewForbidden: a refusal by admission (quota, policy), before anything is stored."""
    head = f'{resource.group_resource} "{name}"' if name else resource.group_resource
    details: dict[str, Any] = {"name": name, "kind": resource.plural}
    if resource.group:
        details["group"] = resource.group
    return ApiError(403, "Forbidden", f"{head} is forbidden: {why}",
                    {k: v for k, v in details.items() if v})


def quota_exceeded(resource: ApiResource, name: str, quota: str = "compute-resources", used: int = 10) -> ApiError:
    """What the ResourceQuota admission plugin answers when one more object would pass the hard limit."""
    counted = quota_resource_name(resource)
    return forbidden(resource, name, f"exceeded quota: {quota}, requested: {counted}=1, used: {counted}={used}, "
                                     f"limited: {counted}={used}")


def invalid(resource: ApiResource, name: str, problems: Sequence[ApiFieldError]) -> ApiError:
    """errors.NewInvalid: the details name the kind (kubectl: `The Pod "x" is invalid`), where the
    other constructors name the resource (`pods`); the message names the qualified kind."""
    details: dict[str, Any] = {"name": name, "kind": resource.kind, "causes": [p.cause() for p in problems]}
    if resource.group:
        details["group"] = resource.group
    return ApiError(422, "Invalid", format_invalid_message(resource.qualified_kind, name, problems), details)


def namespace_terminating(resource: ApiResource, name: str, namespace: str) -> ApiError:
    return ApiError(
        403, "Forbidden",
        f'{resource.group_resource} "{name}" is forbidden: unable to create new content in namespace '
        f"{namespace} because it is being terminated",
        _details(resource, name, causes=[{"reason": "NamespaceTerminating",
                                          "message": f"namespace {namespace} is being terminated",
                                          "field": "metadata.namespace"}]),
    )


def namespace_not_found(namespace: str) -> ApiError:
    return ApiError(404, "NotFound", f'namespaces "{namespace}" not found',
                    {"name": namespace, "kind": "namespaces"})
