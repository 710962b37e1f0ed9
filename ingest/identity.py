"""Whose cluster the streams are: ingest records it, and refuses to publish into another cluster's streams.

A cluster is known by its `kube-system` namespace's uid (what `kubectl get ns kube-system -o jsonpath=
'{.metadata.uid}'` shows; it lives as long as the cluster). The first ingest to start on a set of streams records
it on `<prefix>.cluster` in KUBUS_STATE, with `Nats-Expected-Last-Subject-Sequence: 0`, so of two ingests of
different clusters starting at once exactly one records its own. Every ingest compares its cluster's uid with the
record before it publishes anything: an ingest pointed at another cluster by mistake (a wrong kubeconfig or
context, a copied deployment) stops with one line naming both uids (`kubus ingest` exits 2), instead of merging
two clusters' objects in one history.

Reading the namespace needs `get` on `namespaces` (kube-system only) in ingest's RBAC role
(docs/production.md, "Permissions").
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import msgspec
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from nats.js.errors import APIError, NotFoundError

from ingest.backoff import Backoff
from ingest.publishing import EXPECTED_LAST_SUBJECT_SEQ, MSG_ID, WRONG_LAST_SEQUENCE
from messages import subjects
from runtime.bus import Bus
from runtime.running import StartupError

log = logging.getLogger("kubus.ingest")

NAMESPACE = "kube-system"


class ClusterMismatch(StartupError):
    """The streams belong to another cluster, or the cluster cannot be identified: ingest publishes nothing."""


class ClusterRecord(msgspec.Struct, kw_only=True):
    """The message on `<prefix>.cluster`."""

    uid: str  # the kube-system namespace's uid
    ingest: str = ""  # the instance that recorded it
    recorded_at: str = ""


_record = msgspec.json.Decoder(ClusterRecord)


@dataclass(frozen=True)
class Claim:
    uid: str
    recorded: bool  # this ingest wrote the record (the streams had none)


def read_cluster_uid(api: client.ApiClient) -> str:
    """The kube-system namespace's uid (blocking: run it in a thread). Raises ClusterMismatch when the API
    answers that it cannot be read (forbidden, missing); other errors (the API away) propagate."""
    try:
        response: Any = client.CoreV1Api(api).read_namespace(NAMESPACE, _preload_content=False)  # raw: urllib3
    except ApiException as exc:
        if exc.status in (401, 403, 404):
            raise ClusterMismatch(
                f"cannot read namespace {NAMESPACE} to identify the cluster ({exc.status} {exc.reason}); ingest "
                f"needs get on namespaces ({NAMESPACE}) in its RBAC role, see docs/production.md") from None
        raise
    try:
        uid = str(msgspec.json.decode(response.data).get("metadata", {}).get("uid") or "")
    except (msgspec.DecodeError, AttributeError):
        uid = ""
    finally:
        response.release_conn()
    if not uid:
        raise ClusterMismatch(f"namespace {NAMESPACE} has no metadata.uid: the cluster cannot be identified")
    return uid


async def cluster_uid(api: client.ApiClient, backoff: Backoff) -> str:
    """read_cluster_uid, waiting out an API that does not answer (as the watches do)."""
    while True:
        try:
            uid = await asyncio.to_thread(read_cluster_uid, api)
        except ClusterMismatch:
            raise
        except Exception as exc:  # the API away or failing: try again, as the watches would
            delay = backoff.next()
            log.warning("reading namespace %s to identify the cluster failed (%s: %s); retrying in %.1fs",
                        NAMESPACE, type(exc).__name__, str(exc).strip().splitlines()[0][:200] if str(exc) else "",
                        delay)
            await asyncio.sleep(delay)
            continue
        backoff.reset()
        return uid


# how a kubus gets state of its own, when the caller does not say (its streams and its audit trail both)
OWN_STATE = "another --prefix for its streams and another database (--db-url) for its audit trail"


async def claim(bus: Bus, uid: str, instance: str, now: str, own_state: str = OWN_STATE) -> Claim:
    """Records `uid` as the streams' cluster if none is recorded; raises ClusterMismatch if another is, saying how
    this cluster's kubus gets state of its own (`own_state`: where this process keeps its streams and store)."""
    stream, subject = bus.stream(subjects.STATE_STREAM), subjects.cluster_subject(bus.prefix)
    while True:
        try:
            msg = await bus.js.get_last_msg(stream, subject)
        except NotFoundError:
            record = msgspec.json.encode(ClusterRecord(uid=uid, ingest=instance, recorded_at=now))
            try:
                await bus.js.publish(subject, record, headers={
                    MSG_ID: f"cluster/{uid}", EXPECTED_LAST_SUBJECT_SEQ: "0"})
            except APIError as exc:
                if exc.err_code == WRONG_LAST_SEQUENCE:
                    continue  # another ingest recorded one first: compare with it
                raise
            log.info("recorded cluster %s (the uid of namespace %s) in stream %s", uid, NAMESPACE, stream)
            return Claim(uid, recorded=True)
        try:
            theirs = _record.decode(msg.data or b"").uid
        except msgspec.DecodeError as exc:
            raise ClusterMismatch(f"stream {stream} holds an unreadable cluster record on {subject} ({exc}); "
                                  f"remove it (nats stream rmm {stream} {msg.seq}) to let ingest record "
                                  f"this cluster, {uid}") from None
        if theirs != uid:
            raise ClusterMismatch(
                f"the streams under prefix {bus.prefix!r} belong to cluster {theirs} (the uid of its namespace "
                f"{NAMESPACE}), and this ingest's kubeconfig reaches cluster {uid}: refusing to publish; if cluster "
                f"{uid} is the one meant, give its kubus state of its own: {own_state}; if not, point --kubeconfig "
                f"(or --context) at cluster {theirs}")
        return Claim(uid, recorded=False)
