"""Issue 15: the cost of sending a pod larger than NATS's max_payload compressed (messages/codec.py).

A 1.2 MiB pod (the API accepts up to ~1.5 MiB; NATS's default max_payload is 1 MiB), made two ways: of
configuration text in environment variables (what makes real pods that large: large env blocks, inlined
configuration), and of random bytes in base64 (the worst case: it hardly compresses). For each, the event's
size plain and compressed at zlib levels 1, 6 (kubus's) and 9, and the time to compress and to decode the
compressed event (inflate + parse), best of REPEAT.

    .venv/bin/python -m bench.payload_bench
"""

from __future__ import annotations

import base64
import hashlib
import time
import zlib
from collections.abc import Callable

import msgspec

from messages import codec
from messages.observed import ObservedEvent

SIZE = int(1.2 * 1024 * 1024)
REPEAT = 20


def pod(compressible: bool) -> bytes:
    env = []
    per = 4096
    for i in range(SIZE // per):
        if compressible:
            value = "".join(f"feature_{(i * 31 + j) % 97}.threshold={(i + j) % 1000};" for j in range(per // 20))[:per]
        else:
            value = base64.b64encode(b"".join(hashlib.sha256(f"{i}/{j}".encode()).digest()
                                              for j in range(per // 43)))[:per].decode()
        env.append({"name": f"SETTING_{i}", "value": value})
    return msgspec.json.encode({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "big", "namespace": "default", "uid": "u", "resourceVersion": "1"},
        "spec": {"containers": [{"name": "main", "image": "app:1", "env": env}]}})


def best(work: Callable[[], object]) -> float:
    times = []
    for _ in range(REPEAT):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times) * 1000


def main() -> None:
    print("| pod | event bytes | level | compressed bytes | ratio | compress ms | decode ms (inflate + parse) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, compressible in (("configuration text", True), ("random base64", False)):
        event = ObservedEvent(kind="Pod", type="ADDED", namespace="default", name="big", uid="u",
                              resource_version="1", observed_at="2026-11-26T00:00:00.000000Z", ingest="bench",
                              object=msgspec.Raw(pod(compressible)))
        data = codec.encode(event)
        plain = best(lambda: codec.decode_observed(data))  # noqa: B023 - run at once
        print(f"| {name} | {len(data):,} | none | — | — | — | {plain:.2f} |")
        for level in (1, 6, 9):
            packed = codec.COMPRESSED + zlib.compress(data, level)
            compress = best(lambda: zlib.compress(data, level))  # noqa: B023
            decode = best(lambda: codec.decode_observed(packed))  # noqa: B023
            print(f"| {name} | {len(data):,} | {level} | {len(packed):,} | {len(data) / len(packed):.1f} | "
                  f"{compress:.2f} | {decode:.2f} |")


if __name__ == "__main__":
    main()
