"""Pod names derived from idempotency keys: part of the CreatePods contract.

The reconciler names a pod `generateName` + five characters taken from the pod's idempotency key,
in the API server's alphabet and with its 58-character prefix limit, so a retried create meets its
own pod. Two keys may still land on one name (27^5 names: a few collisions per 10,000 pods), so the
executor then tries the key's next names, as kube-apiserver retries generateName collisions
(RetryGenerateName, up to 8 names). The sequence is fixed, so a redelivered create walks it again
and finds the pod an earlier attempt made.
"""

from __future__ import annotations

import hashlib
from typing import Final

from kube.names import ALPHABET, MAX_GENERATED_NAME_LENGTH, NAME_ATTEMPTS, RANDOM_LENGTH

__all__ = ["NAME_ATTEMPTS", "generated_name"]  # NAME_ATTEMPTS: the executor walks as many of a key's names


def generated_name(prefix: str, key: str, attempt: int = 0) -> str:
    """names.SimpleNameGenerator.GenerateName, with the random part taken from `key` (and `attempt`)."""
    seed = key if attempt == 0 else f"{key}#{attempt}"
    digest = hashlib.sha256(seed.encode()).digest()
    return prefix[:MAX_GENERATED_NAME_LENGTH] + digest[:RANDOM_LENGTH].translate(_LETTER).decode("ascii")


# byte b -> ALPHABET[b % len(ALPHABET)]: the random part in one translate (a pod is named per create planned)
_LETTER: Final = bytes(ord(ALPHABET[b % len(ALPHABET)]) for b in range(256))
