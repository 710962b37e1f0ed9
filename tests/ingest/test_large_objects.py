"""Objects larger than NATS's max_payload (issue 15): compressed on the bus, transparently to every reader;
one too large even compressed becomes a QUARANTINED event naming it (never a wedge)."""

from __future__ import annotations

import base64
import hashlib
import zlib

import msgspec
import pytest

from ingest.observing import fitted
from kube.testing import pod
from messages import codec
from messages.observed import ADDED, QUARANTINED
from tests.reconciler.builders import observed


def padded(size: int, *, compressible: bool) -> msgspec.Raw:
    blob = ("option=enabled;" * (size // 15) if compressible else
            base64.b64encode(b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(size // 43))).decode())
    obj = pod("big").ns("shop").uid("u-1").rv("42").build()
    raw = msgspec.json.decode(codec.encode(obj))
    raw["metadata"]["annotations"] = {"blob": blob}
    return msgspec.Raw(msgspec.json.encode(raw))


def event_of(size: int, *, compressible: bool) -> object:
    event = observed(pod("big").ns("shop").uid("u-1").rv("42").build(), ADDED)
    return msgspec.structs.replace(event, object=padded(size, compressible=compressible))


@pytest.mark.parametrize(("size", "compressible", "form"), [
    pytest.param(1_000, True, "plain", id="small-stays-json"),
    pytest.param(200_000, True, "compressed", id="large-compressible"),
    pytest.param(200_000, False, "quarantined", id="large-incompressible"),
])
def test_an_event_is_fitted_to_the_limit(size: int, compressible: bool, form: str) -> None:
    event = event_of(size, compressible=compressible)
    limit = 64 * 1024 - 4096
    payload, error = fitted(event, limit)  # type: ignore[arg-type]
    assert len(payload) <= limit
    decoded = codec.decode_observed(payload)  # every reader decodes each form the same way
    assert codec.is_compressed(payload) == (form == "compressed")
    if form == "quarantined":
        assert error is not None and decoded.type == QUARANTINED and decoded.error == error
        assert "Pod shop/big (uid u-1, resourceVersion 42) is too large for NATS" in error
        assert f"over the {limit}-byte limit" in error
        assert (decoded.uid, decoded.name, decoded.resource_version) == ("u-1", "big", "42")
    else:
        assert error is None and decoded == event


def test_a_compressed_message_that_is_corrupt_or_a_bomb_is_a_bad_message() -> None:
    with pytest.raises(codec.BadMessage, match="corrupt"):
        codec.decode_observed(codec.COMPRESSED + b"not zlib")
    with pytest.raises(codec.BadMessage, match="truncated"):
        codec.decode_observed(codec.compress(b'{"a": 1}')[:-3])
    bomb = codec.COMPRESSED + zlib.compress(b" " * (codec.MAX_INFLATED + 10))
    with pytest.raises(codec.BadMessage, match="inflates beyond"):
        codec.decode_observed(bomb)
    assert codec.inflated(b'{"plain": true}') == b'{"plain": true}'
