"""Generated names: what kube-apiserver appends to ``metadata.generateName`` (apimachinery's
names.SimpleNameGenerator, util/rand), and how often it tries another name on a collision.

The sim generates names with these, kubus names the pods it creates in the same alphabet (from
idempotency keys, :mod:`messages.naming`), and a ControllerRevision's hash is spelled in it
(rand.SafeEncodeString).
"""

from __future__ import annotations

from typing import Final

__all__ = ["ALPHABET", "MAX_GENERATED_NAME_LENGTH", "NAME_ATTEMPTS", "RANDOM_LENGTH"]

ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
"""util/rand's alphanums: no vowels (no words are spelled) and no 0, 1 or 3 (confusable characters)."""
RANDOM_LENGTH: Final = 5
"""names.randomLength: the characters appended to the prefix."""
MAX_GENERATED_NAME_LENGTH: Final = 63 - RANDOM_LENGTH
"""names.maxGeneratedNameLength: a longer generateName is cut to this before the random part."""
NAME_ATTEMPTS: Final = 8
"""kube-apiserver's maxNameGenerationCreateAttempts: names it tries before answering AlreadyExists."""
