"""What ensure_streams compares on an existing stream (and what it leaves to the operator), the seed list
--nats-url takes, and the one-line refusals on a single nats-server."""

from __future__ import annotations

import dataclasses
import uuid

import nats.errors
import pytest
from nats.js.api import RetentionPolicy, StorageType, StreamConfig, StreamSource, SubjectTransform

from messages import subjects
from runtime.bus import (
    StreamError,
    StreamSettings,
    _allow_direct,
    connect,
    ensure_streams,
    incompatibilities,
    seeds,
    wanted,
)
from runtime.natsserver import EmbeddedNats

PREFIX = "kubus"
EVENTS, STATE, ACTIONS, RESULTS, DEAD = wanted(PREFIX, 16, 3600.0, StreamSettings())


def echoed(config: StreamConfig, **changed: object) -> StreamConfig:
    """`config` as the server sends it back (enums as text), with `changed` applied."""
    text = {"retention": getattr(config.retention, "value", config.retention),
            "discard": getattr(config.discard, "value", config.discard)}
    return dataclasses.replace(config, **{**text, **changed})  # type: ignore[arg-type]


@pytest.mark.parametrize(("want", "changed"), [
    pytest.param(EVENTS, {"max_bytes": 50 * 1024**3, "num_replicas": 5, "max_age": 0.0}, id="limits-and-replicas"),
    pytest.param(ACTIONS, {"storage": StorageType.MEMORY, "discard": "old"}, id="storage-and-discard"),
    pytest.param(RESULTS, {"duplicate_window": 3600.0, "description": "ours now"}, id="a-longer-duplicate-window"),
    pytest.param(STATE, {"metadata": {"team": "platform"}}, id="metadata"),
])
def test_what_the_operator_owns_is_not_compared(want: StreamConfig, changed: dict[str, object]) -> None:
    assert incompatibilities(want, echoed(want, **changed)) == []


@pytest.mark.parametrize(("want", "changed", "problem"), [
    pytest.param(EVENTS, {"subjects": ["kubus.events.>", "other.>"]},
                 "subjects are ['kubus.events.>', 'other.>'], kubus needs ['kubus.events.>']", id="subjects"),
    pytest.param(ACTIONS, {"retention": "interest"}, "retention is interest, kubus needs workqueue", id="retention"),
    pytest.param(EVENTS, {"duplicate_window": 30.0}, "duplicate window is 30 s, kubus needs at least 120 s",
                 id="duplicate-window"),
    pytest.param(STATE, {"max_msgs_per_subject": 5}, "max_msgs_per_subject is 5, kubus needs 1",
                 id="state-keeps-more-than-the-last"),
    pytest.param(STATE, {"sources": [StreamSource(name="KUBUS_EVENTS", subject_transforms=[
        SubjectTransform(src="kubus.events.>", dest="kubus.snapshot.>")])]},
                 "sources are ['KUBUS_EVENTS (kubus.events.> -> kubus.snapshot.>)'], kubus needs "
                 "['KUBUS_EVENTS (kubus.events.> -> kubus.state.>)']", id="state-transform"),
    pytest.param(STATE, {"sources": None},
                 "sources are none, kubus needs ['KUBUS_EVENTS (kubus.events.> -> kubus.state.>)']",
                 id="state-without-source"),
])
def test_what_kubus_depends_on_is_named(want: StreamConfig, changed: dict[str, object], problem: str) -> None:
    assert incompatibilities(want, echoed(want, **changed)) == [problem]


def test_every_stream_is_created_with_explicit_limits_and_the_replicas_asked() -> None:
    created = wanted(PREFIX, 16, 3600.0, StreamSettings(replicas=3, events_max_bytes=4 * 1024**3))
    assert {c.name: (c.num_replicas, c.max_bytes, getattr(c.discard, "value", None)) for c in created} == {
        "KUBUS_EVENTS": (3, 4 * 1024**3, "old"), "KUBUS_STATE": (3, -1, "old"),
        "KUBUS_ACTIONS": (3, 128 * 1024**2, "new"), "KUBUS_RESULTS": (3, 256 * 1024**2, "old"),
        "KUBUS_DEAD": (3, 32 * 1024**2, "old")}


@pytest.mark.parametrize(("url", "servers"), [
    ("nats://10.0.0.1:4222", ["nats://10.0.0.1:4222"]),
    ("nats://a:4222,nats://b:4222, nats://c:4222", ["nats://a:4222", "nats://b:4222", "nats://c:4222"]),
    ("a:4222,b:4222", ["nats://a:4222", "nats://b:4222"]),
    ("tls://a:4222,", ["tls://a:4222"]),
])
def test_seed_urls(url: str, servers: list[str]) -> None:
    assert seeds(url) == servers


async def test_a_stream_without_its_partition_count_is_refused(nats_server: EmbeddedNats) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    nc = await connect(nats_server.url, "test")
    try:
        name = subjects.stream_name(subjects.EVENTS_STREAM, prefix)
        await nc.jetstream().add_stream(StreamConfig(name=name, subjects=[f"{prefix}.events.>"],
                                                     retention=RetentionPolicy.LIMITS, duplicate_window=120))
        with pytest.raises(StreamError, match=rf"^stream {name} does not fit kubus: its metadata kubus.partitions "
                                              r"is missing \(the partition count"):
            await ensure_streams(nc, prefix=prefix)
    finally:
        await nc.close()


async def test_replicas_a_single_server_cannot_have_are_refused(nats_server: EmbeddedNats) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    nc = await connect(nats_server.url, "test")
    try:
        with pytest.raises(StreamError) as refused:
            await ensure_streams(nc, prefix=prefix, settings=StreamSettings(replicas=3))
        name = subjects.stream_name(subjects.EVENTS_STREAM, prefix)
        assert str(refused.value) == (f"cannot create stream {name} (3 replicas, max_bytes 1 GiB): replicas > 1 not "
                                      "supported in non-clustered mode; see --stream-replicas and --events-max-bytes")
    finally:
        await nc.close()


async def test_a_restart_changes_nothing(nats_server: EmbeddedNats) -> None:
    """A second start finds every stream fitting, keeps the partition count it was created with, and
    leaves the limits it was created with even when the flags now say otherwise."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    nc = await connect(nats_server.url, "test")
    try:
        first = await ensure_streams(nc, prefix=prefix, partitions=4)
        again = await ensure_streams(nc, prefix=prefix, partitions=8,
                                     settings=StreamSettings(events_max_bytes=1024**2))
        assert (first.partitions, again.partitions) == (4, 4)
        info = await nc.jetstream().stream_info(again.stream(subjects.EVENTS_STREAM))
        assert info.config.max_bytes == 1024**3
    finally:
        await nc.close()


async def test_kubus_state_answers_direct_gets_and_one_made_without_them_is_changed_at_the_next_start(
        nats_server: EmbeddedNats) -> None:
    """The executor reads a deleted object's last event by a direct get (executor/laststate.py): KUBUS_STATE is
    created with allow_direct, and one an earlier kubus made without it gains it, its messages and the
    operator's limits kept; nothing else is changed."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    nc = await connect(nats_server.url, "test")
    try:
        bus = await ensure_streams(nc, prefix=prefix, partitions=4)
        js = nc.jetstream()
        state = bus.stream(subjects.STATE_STREAM)
        assert (await js.stream_info(state)).config.allow_direct is True
        assert [name for name in bus.streams() if (await js.stream_info(name)).config.allow_direct] == [state]
        earlier = dataclasses.replace((await js.stream_info(state)).config, allow_direct=False, max_age=7200.0)
        await js.update_stream(earlier)
        await js.publish(subjects.cluster_subject(prefix), b"the cluster")
        assert (await js.stream_info(state)).config.allow_direct is False
        await ensure_streams(nc, prefix=prefix, partitions=4)
        info = await js.stream_info(state)
        assert info.config.allow_direct is True and info.config.max_age == 7200.0 and info.state.messages == 1
        got = await js.get_last_msg(state, subjects.cluster_subject(prefix), direct=True)
        assert got.data == b"the cluster"
    finally:
        await nc.close()


async def test_an_identity_that_may_not_turn_direct_gets_on_starts_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    """Only the admin identity may change a stream: a service's request is dropped by the server (a permission
    violation, no answer). It says so and starts: the executor reads each object it deletes first."""

    class Refusing:
        async def request(self, subject: str, payload: bytes, timeout: float) -> None:
            raise nats.errors.TimeoutError

    class Js:
        _nc = Refusing()

    with caplog.at_level("WARNING", logger="kubus.jetstream"):
        await _allow_direct(Js(), "KUBUS_STATE")  # type: ignore[arg-type]
    [record] = caplog.records
    assert "cannot turn on allow_direct" in record.getMessage()
    assert "kubus streams ensure" in record.getMessage()
