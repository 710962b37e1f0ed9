"""Building a frozen, slotted dataclass without its __init__, where one is made per pod or per pod event.

A frozen dataclass's __init__ sets each field through object.__setattr__ (its own __setattr__ refuses); the
slot's member descriptor sets it directly, in about half the time of the whole __init__. The hot paths that
build such a value field by field (`object.__new__`, then one setter per field) take their setters from here:
the DaemonSet's rolling-update view (a DaemonPod per pod), the expectations (a value per observed pod event)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def slot_setter(cls: type, field_name: str) -> Callable[[Any, Any], None]:
    """The setter of `cls`'s slot `field_name` (a dataclass declared with slots=True)."""
    descriptor: Any = cls.__dict__[field_name]  # the slot's member descriptor
    setter: Callable[[Any, Any], None] = descriptor.__set__
    return setter
