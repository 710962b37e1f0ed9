"""Object metadata and the API machinery types every kind shares (meta/v1).

Field names are snake_case in Python and the API's camelCase on the wire.
Nested types omit fields that hold their default, as Go's ``omitempty`` does;
top-level kinds always write every field so ``apiVersion`` and ``kind`` are
never dropped from a request body.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import msgspec

__all__ = [
    "IntOrString",
    "LabelSelector",
    "LabelSelectorRequirement",
    "List",
    "ListMeta",
    "Model",
    "ObjectMeta",
    "ObjectReference",
    "OwnerReference",
    "Resource",
    "Status",
    "StatusCause",
    "StatusDetails",
    "WatchEvent",
]

IntOrString = int | str
"""intstr.IntOrString: a JSON number or string, e.g. ``1`` or ``"25%"``."""

T = TypeVar("T")


class Model(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel", gc=False):
    """Base of nested API types: camelCase on the wire, defaults omitted.

    Subclasses inherit ``rename`` and ``omit_defaults`` but not ``kw_only``,
    hence the ``kw_only=True`` on every class below.
    """


class Resource(msgspec.Struct, kw_only=True, rename="camel", gc=False):
    """Base of top-level kinds: every field is written, so apiVersion and kind always are."""


class OwnerReference(Model, kw_only=True):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(Model, kw_only=True):
    name: str = ""
    generate_name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    deletion_grace_period_seconds: int | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    owner_references: list[OwnerReference] = []
    finalizers: list[str] = []


class LabelSelectorRequirement(Model, kw_only=True):
    key: str = ""
    operator: str = ""
    values: list[str] = []


class LabelSelector(Model, kw_only=True):
    match_labels: dict[str, str] = {}
    match_expressions: list[LabelSelectorRequirement] = []


class ObjectReference(Model, kw_only=True):
    kind: str = ""
    namespace: str = ""
    name: str = ""
    uid: str = ""
    api_version: str = ""
    resource_version: str = ""
    field_path: str = ""


class ListMeta(Model, kw_only=True):
    resource_version: str = ""
    continue_: str = msgspec.field(default="", name="continue")
    remaining_item_count: int | None = None


class List(Resource, Generic[T], kw_only=True):
    """A list response, e.g. ``List[Pod]`` for ``GET /api/v1/pods``."""

    api_version: str = ""
    kind: str = ""
    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[T] = []


class WatchEvent(Model, Generic[T], kw_only=True):
    """One line of a watch stream. ERROR events carry a Status: see ``kube.codec.decode_watch_event``."""

    type: str = ""
    object: T


class StatusCause(Model, kw_only=True):
    reason: str = ""
    message: str = ""
    field: str = ""


class StatusDetails(Model, kw_only=True):
    name: str = ""
    group: str = ""
    kind: str = ""
    uid: str = ""
    causes: list[StatusCause] = []
    retry_after_seconds: int = 0


class Status(Resource, kw_only=True):
    """meta/v1 Status: the body of API errors and of watch ERROR events."""

    api_version: str = "v1"
    kind: str = "Status"
    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    status: str = ""
    message: str = ""
    reason: str = ""
    details: StatusDetails | None = None
    code: int = 0
