"""`kubus status`: the reconcilers sharing the namespace partitions, which partitions each one owns
(with the lease epochs), how far behind each partition is, the outbox's backlog and the executors'
work queue.

Membership, leases, positions and the outbox come from the SQL store; the lag per partition and the
work queue from JetStream. Without NATS (unreachable, or no --nats-url) the SQL parts are printed
all the same, with a line saying why the rest is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from messages import subjects
from runtime import flags, printing, redact
from runtime.bus import NO_AUTH, NatsAuth

CLUSTER_PARTITION = -1  # how the cluster partition is numbered in consumer_positions
DEFAULT_CONSUMER = "reconciler"  # the reconciler's name in consumer_positions


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "status", help="show the reconcilers, their partitions, lag per partition and the outbox",
        description="Show the reconcilers sharing the namespace partitions (heartbeat, partitions owned with "
                    "their lease epochs), per partition its owner, lease expiry, committed position, lag and "
                    "outbox backlog, and the executors' work queue. Reads the SQL store and, when reachable, "
                    "JetStream.")
    flags.add_database(p.add_argument_group("database"))
    g = p.add_argument_group("bus")
    flags.add_bus(g, without="lag and the work queue are not shown")
    flags.add_partitions(g)
    flags.add_lease_ttl(p)
    p.add_argument("--consumer", default=DEFAULT_CONSUMER, help=argparse.SUPPRESS)
    printing.add_output(p, json_flag=True)  # --json: the earlier spelling of -o json
    p.set_defaults(run=run)


# --- the report ----------------------------------------------------------------------------------

@dataclass
class MemberStatus:
    instance: str
    live: bool
    started_at: str
    heartbeat_age_s: float
    partitions: dict[str, int]  # partition -> epoch, the unexpired leases it holds
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class PartitionStatus:
    partition: str  # "0".."N-1", or "cluster" (read by every reconciler, no lease)
    owner: str | None
    epoch: int | None
    expires_in_s: float | None  # negative: expired, nobody renewed it
    position: int | None  # the last committed KUBUS_EVENTS sequence of the partition
    lag: int | None  # events of the partition after `position`; None without NATS
    outbox_pending: int = 0
    outbox_oldest_age_s: float | None = None


@dataclass
class ExecutorQueue:
    consumer: str
    pending: int  # actions not yet delivered to any executor
    in_flight: int  # delivered, not yet acknowledged
    waiting_pulls: int  # fetches of idle executors waiting for work


@dataclass
class NatsStatus:
    url: str | None
    reachable: bool
    error: str | None = None
    events_last_seq: int | None = None
    executors: ExecutorQueue | None = None


@dataclass
class PipelineStatus:
    store: str
    at: str
    partition_count: int
    lease_ttl_s: float
    members: list[MemberStatus]
    partitions: list[PartitionStatus]
    outbox_pending: int
    outbox_oldest_age_s: float | None
    nats: NatsStatus


@dataclass
class StoreSnapshot:
    label: str
    members: list[Any]  # store.leases.Member
    leases: list[Any]  # store.leases.Lease
    positions: dict[int, int]
    backlog: dict[str, Any]  # subject -> store.overview.Backlog
    lease_now: datetime | None = None  # the lease clock (PostgreSQL's) when read; None: this host's `now`


@dataclass
class NatsSnapshot:
    partitions: int | None  # as recorded in KUBUS_EVENTS's metadata
    last_seq: int
    lag: dict[int, int]  # partition (CLUSTER_PARTITION for "cluster") -> events after the position
    executors: ExecutorQueue | None


def build(snap: StoreSnapshot, nats: NatsSnapshot | None, nats_status: NatsStatus, *, now: datetime,
          ttl: float, partitions: int, prefix: str) -> PipelineStatus:
    """The report from what was read: pure, so it is tested without a database or NATS."""
    count = (nats.partitions if nats is not None and nats.partitions else None) or partitions
    numbers = sorted({*range(count), *(lease.partition for lease in snap.leases),
                      *(p for p in snap.positions if p != CLUSTER_PARTITION)})
    leases = {lease.partition: lease for lease in snap.leases}
    lease_now = snap.lease_now or now  # leases and heartbeats are measured on the database's clock
    held: dict[str, dict[str, int]] = {}
    for lease in snap.leases:
        if lease.held_at(lease_now):
            held.setdefault(lease.owner, {})[str(lease.partition)] = lease.epoch
    members = [MemberStatus(instance=m.instance, live=m.heartbeat_at > lease_now - timedelta(seconds=ttl),
                            started_at=m.started_at.isoformat(),
                            heartbeat_age_s=_age(lease_now, m.heartbeat_at) or 0.0,
                            partitions=held.pop(m.instance, {}), info=dict(m.info))
               for m in snap.members]
    for instance, owned in sorted(held.items()):  # a lease whose holder's membership row is gone
        members.append(MemberStatus(instance=instance, live=False, started_at="", heartbeat_age_s=-1.0,
                                    partitions=owned))
    by_partition: dict[str, tuple[int, datetime | None]] = {}
    for subject, backlog in snap.backlog.items():
        token = subject.removeprefix(f"{prefix}.actions.") if subject.startswith(f"{prefix}.actions.") else "other"
        pending, oldest = by_partition.get(token, (0, None))
        by_partition[token] = (pending + backlog.pending, _min(oldest, backlog.oldest))
    rows: list[PartitionStatus] = []
    for number in [*numbers, CLUSTER_PARTITION]:
        name = subjects.CLUSTER if number == CLUSTER_PARTITION else str(number)
        lease = leases.get(number)
        owner = lease.owner if lease is not None else None
        expires = lease.expires_at if lease is not None and owner is not None else None
        pending, oldest = by_partition.pop(name, (0, None))
        rows.append(PartitionStatus(
            partition=name, owner=owner, epoch=lease.epoch if lease is not None else None,
            expires_in_s=None if expires is None else round((expires - lease_now).total_seconds(), 1),
            position=snap.positions.get(number), lag=None if nats is None else nats.lag.get(number),
            outbox_pending=pending, outbox_oldest_age_s=_age(now, oldest)))
    for name, (pending, oldest) in sorted(by_partition.items()):  # subjects of no known partition
        rows.append(PartitionStatus(partition=name, owner=None, epoch=None, expires_in_s=None, position=None,
                                    lag=None, outbox_pending=pending, outbox_oldest_age_s=_age(now, oldest)))
    oldest_all = None
    for backlog in snap.backlog.values():
        oldest_all = _min(oldest_all, backlog.oldest)
    if nats is not None:
        nats_status.events_last_seq = nats.last_seq
        nats_status.executors = nats.executors
    return PipelineStatus(store=snap.label, at=now.isoformat(), partition_count=count, lease_ttl_s=ttl, members=members,
                  partitions=rows, outbox_pending=sum(b.pending for b in snap.backlog.values()),
                  outbox_oldest_age_s=_age(now, oldest_all), nats=nats_status)


def _age(now: datetime, then: datetime | None) -> float | None:
    return None if then is None else round((now - then).total_seconds(), 1)


def _min(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else min(a, b)


# --- reading ---------------------------------------------------------------------------------------

async def read_store(store: Any, consumer: str = DEFAULT_CONSUMER) -> StoreSnapshot:
    from store import leases, overview, positions

    async with store.engine.connect() as conn:
        # PostgreSQL: the leases' own clock, not this host's (SQLite: None, the caller's `now`)
        shared = store.backend == "postgresql" and store.lease_clock == "database"
        return StoreSnapshot(label=store.label, members=await leases.members(conn), leases=await leases.leases(conn),
                             positions=await positions.load_all(conn, consumer),
                             backlog=await overview.outbox_backlog(conn),
                             lease_now=await leases.lease_now(conn, datetime.now(UTC)) if shared else None)


async def read_nats(url: str, prefix: str, positions: Mapping[int, int], partitions: int,
                    auth: NatsAuth = NO_AUTH) -> NatsSnapshot:
    """Lag per partition: an ephemeral consumer per partition, filtered to its subjects and starting
    after its committed position, whose `num_pending` JetStream computes from the stream's index
    (no message is delivered); deleted at once, and gone on its own after 30 s if we die first."""
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
    from nats.js.errors import NotFoundError

    from executor.config import ExecutorConfig
    from runtime.bus import close, connect

    nc = await connect(url, "kubus-status", reconnect=False, auth=auth)
    try:
        js = nc.jetstream()
        events = subjects.stream_name(subjects.EVENTS_STREAM, prefix)
        info = await js.stream_info(events)
        recorded = (info.config.metadata or {}).get("kubus.partitions")
        count = int(recorded) if recorded else partitions

        async def pending(number: int) -> tuple[int, int]:
            token = subjects.CLUSTER if number == CLUSTER_PARTITION else str(number)
            start = positions.get(number, 0) + 1
            config = ConsumerConfig(filter_subject=subjects.events_filter(token, prefix), ack_policy=AckPolicy.NONE,
                                    deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start,
                                    inactive_threshold=30.0, mem_storage=True, num_replicas=1)
            consumer = await js.add_consumer(events, config)
            with contextlib.suppress(Exception):
                await js.delete_consumer(events, consumer.name)
            return number, int(consumer.num_pending or 0)

        numbers = [*range(count), *(p for p in positions if p >= count), CLUSTER_PARTITION]
        lag = dict(await asyncio.gather(*(pending(n) for n in numbers)))
        executors = None
        durable = ExecutorConfig().durable
        with contextlib.suppress(NotFoundError):
            queue = await js.consumer_info(subjects.stream_name(subjects.ACTIONS_STREAM, prefix), durable)
            executors = ExecutorQueue(consumer=durable, pending=int(queue.num_pending or 0),
                                      in_flight=int(queue.num_ack_pending or 0),
                                      waiting_pulls=int(queue.num_waiting or 0))
        return NatsSnapshot(partitions=count if recorded else None, last_seq=int(info.state.last_seq), lag=lag,
                            executors=executors)
    finally:
        await close(nc)


async def collect(*, db_url: str | None, data_dir: str, nats_url: str | None, prefix: str, partitions: int,
                  ttl: float, now: datetime, consumer: str = DEFAULT_CONSUMER,
                  auth: NatsAuth = NO_AUTH) -> PipelineStatus:
    """Everything `kubus status` shows. Raises DatabaseUnavailable; NATS problems end up in `nats`."""
    from store.engine import open_store

    store = await open_store(db_url, data_dir)
    try:
        snap = await read_store(store, consumer)
    finally:
        await store.close()
    nats: NatsSnapshot | None = None
    nats_status = NatsStatus(url=redact.url(nats_url) if nats_url else None, reachable=False)
    if nats_url is None:
        nats_status.error = "no --nats-url given (KUBUS_NATS_URL): lag and the work queue are not shown"
    else:
        try:
            nats = await read_nats(nats_url, prefix, snap.positions, partitions, auth)
            nats_status.reachable = True
        except Exception as exc:  # unreachable, or no kubus streams there: the SQL part still stands
            nats_status.error = _nats_error(exc)
            nats_status.reachable = not _is_unreachable(exc)
    return build(snap, nats, nats_status, now=now, ttl=ttl, partitions=partitions, prefix=prefix)


def _is_unreachable(exc: BaseException) -> bool:
    from runtime.bus import NatsUnavailable

    return isinstance(exc, NatsUnavailable | OSError | TimeoutError)


def _nats_error(exc: BaseException) -> str:
    from nats.js.errors import NotFoundError

    if _is_unreachable(exc):
        return f"NATS unreachable: {redact.text(str(exc))}"
    if isinstance(exc, NotFoundError):
        return "NATS reachable, but it holds no kubus streams for this --prefix"
    return f"NATS: {type(exc).__name__}: {redact.text(str(exc))}"


# --- printing --------------------------------------------------------------------------------------

def to_json(status: PipelineStatus) -> str:
    return json.dumps(asdict(status), indent=2, sort_keys=False)


def render(status: PipelineStatus) -> str:
    lines = [f"store: {status.store}"]
    nats = status.nats
    if nats.reachable and nats.error is None:
        lines.append(f"nats:  {nats.url} (KUBUS_EVENTS at sequence {nats.events_last_seq})")
    else:
        lines.append(f"nats:  {nats.error}")
    lines.append("")
    live = sum(1 for m in status.members if m.live)
    lines.append(f"MEMBERS ({live} live, lease ttl {status.lease_ttl_s:g}s)")
    members = [[m.instance, "live" if m.live else "gone",
                "-" if m.heartbeat_age_s < 0 else f"{m.heartbeat_age_s:g}s ago",
                " ".join(f"{p}({e})" for p, e in sorted(m.partitions.items(), key=lambda x: int(x[0]))) or "-"]
               for m in status.members]
    lines += printing.columns([["INSTANCE", "STATE", "HEARTBEAT", "PARTITIONS (epoch)"],
                               *(members or [["(none)", "", "", ""]])])
    lines.append("")
    lines.append(f"PARTITIONS ({status.partition_count})")
    partitions = [[p.partition, p.owner or ("(every member)" if p.partition == subjects.CLUSTER else "-"),
                   _dash(p.epoch), "-" if p.expires_in_s is None else
                   (f"{p.expires_in_s:g}s" if p.expires_in_s > 0 else f"expired {-p.expires_in_s:g}s ago"),
                   _dash(p.position), _dash(p.lag), str(p.outbox_pending),
                   "-" if p.outbox_oldest_age_s is None else f"{p.outbox_oldest_age_s:g}s"]
                  for p in status.partitions]
    lines += printing.columns([["PARTITION", "OWNER", "EPOCH", "EXPIRES", "POSITION", "LAG", "OUTBOX", "OLDEST"],
                               *partitions])
    lines.append("")
    oldest = "" if status.outbox_oldest_age_s is None else f", oldest {status.outbox_oldest_age_s:g}s"
    lines.append(f"OUTBOX: {status.outbox_pending} pending{oldest}")
    if nats.executors is not None:
        q = nats.executors
        lines.append(f"EXECUTORS: {q.pending} actions queued, {q.in_flight} in flight, "
                     f"{q.waiting_pulls} idle fetches waiting (consumer {q.consumer})")
    elif nats.reachable and nats.error is None:
        lines.append("EXECUTORS: no executor has started on this bus yet")
    return "\n".join(lines) + "\n"


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def run(args: argparse.Namespace) -> int:
    from store.engine import DatabaseUnavailable
    from store.urls import DB_FILE

    if args.db_url is None and not (Path(args.data_dir) / DB_FILE).exists():
        print(f"kubus status: no kubus database in {args.data_dir} (set --db-url or --data-dir)", file=sys.stderr)
        return 2
    # connect()'s reconnect notices are for services; here a closed connection is the plan
    logging.getLogger("kubus.jetstream").setLevel(logging.ERROR)
    try:
        status = asyncio.run(collect(db_url=args.db_url, data_dir=args.data_dir, nats_url=args.nats_url,
                                     prefix=args.prefix, partitions=args.partitions, ttl=args.lease_ttl,
                                     now=datetime.now(UTC), consumer=args.consumer, auth=flags.nats_auth(args)))
    except DatabaseUnavailable as exc:
        print(f"kubus status: {redact.text(str(exc))}", file=sys.stderr)
        return 2
    sys.stdout.write(printing.dump(asdict(status), args.output) if args.output in ("json", "yaml") else render(status))
    return 0
