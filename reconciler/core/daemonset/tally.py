"""A DaemonSet's claim, its pods by node and its status counts, kept up to date from what changed.

Every sync of a DaemonSet claims its pods, groups them by node and counts the status over every node
(syncDaemonSet's getNodesToDaemonPods and updateDaemonSetStatus): at 5,000 nodes ~10 ms of Python, even
for a sync that only refreshes the status while a round of creates is in flight, and those run every
STATUS_ONLY_INTERVAL for as long as the round lasts (the slower the machine, the more of them). Between
two syncs only the pods and nodes the watch changed can change the answer, so a :class:`StatusTally`
keeps the answer and redoes only them: the cache's journals (reconciler.core.cache.Journal) name the
pods of the DaemonSet's namespace and the nodes that changed since the tally last looked. A managing sync
reads manage's inputs from it the same way (:meth:`StatusTally.manage_inputs`: every node's placement, and the
nodes manage cannot skip) and whether every pod is of the current revision (:meth:`StatusTally.all_updated`),
instead of walking every node and every pod.

The tally is a memo, not state of its own: after :meth:`StatusTally.claim` and :meth:`StatusTally.count`
its claim, its map of pods by node and its counts are exactly what claim_facts, nodes_to_daemon_facts and
calculate_status_facts compute from the same cache, and manage over its inputs decides what manage_facts
decides over every node (tests/reconciler/test_daemonset_tally.py checks this after every step of random
histories). Whenever it cannot tell what changed (a first sync, a journal that
forgot, another cache, a DaemonSet whose uid, selector or template changed, a clock that went back) it
reads everything again. Pure: no I/O, no clock (``now`` is passed in).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Final

import msgspec

from kube.apps import DaemonSet, DaemonSetStatus
from kube.core import Node, Pod, PodSpec
from kube.labels import Selector
from kube.pods import PodFacts
from reconciler.core.cache import Journal
from reconciler.core.daemonset.manage import facts_order_key, is_settled
from reconciler.core.daemonset.placement import Placement, node_placer
from reconciler.core.daemonset.rollout import labels_updated, template_generation
from reconciler.core.daemonset.status import NO_COUNTS, NodeCounts, node_counts, summed
from reconciler.core.view import CacheView

__all__ = ["StatusTally"]

_POD: Final = "Pod"
_NODE: Final = "Node"

Placer = Callable[[Node], Placement]


class StatusTally:
    """One DaemonSet's claim, pods by node and status counts (see the module's docstring)."""

    def __init__(self) -> None:
        self._pod_journal: Journal | None = None  # None: nothing read yet
        self._node_journal: Journal | None = None
        self._pods_read = self._nodes_read = 0  # the journals' positions read up to
        self._owner: tuple[str, str, bool, Selector] | None = None  # (uid, namespace, being deleted, selector)
        self._spec: PodSpec | None = None  # the template's pod spec the placements are of
        self._comparison_operators = False
        self._counted_for: tuple[str, str | None, int] | None = None  # (hash, template generation, minReadySeconds)
        self._now: datetime | None = None  # the clock the counts are of
        self._recount_all = True
        self._dirty: set[str] = set()  # the names of the nodes whose pods changed since the last count
        # claim_facts' answers by pod uid: claimed (its own matching pods, and the orphans it adopts), of which
        # the orphans to adopt, and its own pods no longer matching (to release)
        self._claimed: dict[str, PodFacts] = {}
        self._adopted: dict[str, PodFacts] = {}
        self._released: dict[str, PodFacts] = {}
        self.by_node: dict[str, list[PodFacts]] = {}  # nodes_to_daemon_facts of the claimed pods: read only
        self._nodes: dict[str, Node] = {}  # uid -> every cached node
        self._uids_by_name: dict[str, list[str]] = {}  # node name -> the uids of the cached nodes of that name
        self._placements: dict[str, Placement] = {}  # node uid -> NodeShouldRunDaemonPod's answer
        self._counts: dict[str, NodeCounts] = {}  # node uid -> what it adds to the status (NO_COUNTS: left out)
        self._totals = [0, 0, 0, 0, 0, 0]  # the six counts of every NodeCounts, summed
        self._waiting: dict[str, datetime] = {}  # node uid -> when its counted pod turns available
        # manage's inputs, kept as the counts are but brought up to date only when a managing sync asks for them (a
        # status-only sync does not): every node name's placement in name order, and the names manage_placed must
        # visit (all but those is_settled lets it skip); the names changed since they were, or None: every name
        self._placed: dict[str, Placement] = {}
        self._unsettled: set[str] = set()
        self._to_settle: set[str] | None = None
        # the uids of the pods of by_node not of the revision (hash, template generation label) they were checked
        # against (None: every pod to check again), and the pods placed since, to check (as lazily)
        self._outdated: set[str] = set()
        self._outdated_for: tuple[str, str | None] | None = None
        self._unchecked: dict[str, PodFacts] = {}

    # --- what a sync reads ------------------------------------------------------------------------------
    def claimed(self) -> list[PodFacts]:
        """claim_facts' claimed pods (orphans to adopt included), in no particular order."""
        return list(self._claimed.values())

    def adopt(self) -> list[Pod]:
        return [facts.pod for facts in self._adopted.values()]

    def release(self) -> list[Pod]:
        return [facts.pod for facts in self._released.values()]

    @property
    def node_count(self) -> int:
        return len(self._nodes)

    def all_updated(self) -> bool:
        """Whether every pod of :attr:`by_node` is of the revision of the last :meth:`count` (labels_updated)."""
        assert self._counted_for is not None
        revision = self._counted_for[:2]
        if revision != self._outdated_for:
            self._outdated_for = revision
            self._outdated = {facts.uid for pods in self.by_node.values() for facts in pods
                              if not labels_updated(facts.labels, *revision)}
        else:
            self._outdated.update(uid for uid, facts in self._unchecked.items()
                                  if not labels_updated(facts.labels, *revision))
        self._unchecked = {}
        return not self._outdated

    def manage_inputs(self) -> tuple[dict[str, Placement], list[tuple[str, Placement]]] | None:
        """manage_placed's ``placements`` (a copy) and ``visits`` as of the last :meth:`count`, or None when two
        cached nodes share a name (manage_facts visits each of them, in the cache's order: let it)."""
        if len(self._uids_by_name) != len(self._nodes):
            return None
        if self._to_settle is None:
            self._settle_all()
        else:
            self._settle(self._to_settle)
        self._to_settle = set()
        placed = self._placed
        return dict(placed), [(name, placed[name]) for name in sorted(self._unsettled)]

    def status(self, ds: DaemonSet, *, update_observed_generation: bool) -> DaemonSetStatus:
        """calculate_status_facts over every cached node, as of the last :meth:`count` (``ds`` is untouched)."""
        desired, current, misscheduled, ready, available, updated = self._totals
        return msgspec.structs.replace(
            ds.status, desired_number_scheduled=desired, current_number_scheduled=current,
            number_misscheduled=misscheduled, number_ready=ready, updated_number_scheduled=updated,
            number_available=available, number_unavailable=desired - available,
            observed_generation=ds.metadata.generation if update_observed_generation else ds.status.observed_generation)

    # --- keeping up -------------------------------------------------------------------------------------
    def claim(self, ds: DaemonSet, selector: Selector, view: CacheView) -> None:
        """Brings the claim and the pods by node up to ``view`` for ``ds``."""
        meta = ds.metadata
        owner = (meta.uid, meta.namespace, meta.deletion_timestamp is not None, selector)
        journal = view.journal(_POD, meta.namespace)
        changed = journal.since(self._pods_read) if journal is self._pod_journal and owner == self._owner else None
        self._pod_journal, self._pods_read, self._owner = journal, journal.end, owner
        if changed is None:
            self._claimed, self._adopted, self._released, self.by_node = {}, {}, {}, {}
            self._outdated_for = None  # every pod to check again (all_updated)
            self._recount_all = True
            matched: dict[int, bool] = {}  # as claim_facts: pods with equal labels share one dict, matched once
            for facts in view.owned_or_orphan_pods(meta.namespace, meta.uid):
                self._take(facts, matched)
            return
        matched = {}  # here too: the labels looked up are the cached pods', all alive throughout
        # a uid changed several times is brought up to its current facts once, where its last change is listed:
        # each pass over a uid reads its current facts, so the ones before the last change nothing of the outcome
        # (not even the order of the claimed pods or of a node's tied pods, where each pass moves it last)
        for uid in reversed(dict.fromkeys(reversed(changed))):
            before = self._claimed.pop(uid, None)
            if before is not None:
                self._adopted.pop(uid, None)
                self._unplace(before)
            else:
                self._released.pop(uid, None)
            now_facts = view.pod_facts_of(uid)
            if now_facts is not None and now_facts.pod.metadata.namespace == meta.namespace:
                self._take(now_facts, matched)

    def count(self, ds: DaemonSet, hash_: str, view: CacheView, now: datetime, *, comparison_operators: bool) -> None:
        """Brings the nodes, their placements and the counts up to ``view`` at ``now`` (after :meth:`claim`)."""
        journal = view.journal(_NODE, "")
        changed = journal.since(self._nodes_read) if journal is self._node_journal else None
        self._node_journal, self._nodes_read = journal, journal.end
        spec = ds.spec.template.spec
        same_template = comparison_operators == self._comparison_operators and (
            spec is self._spec or (self._spec is not None and _placement_inputs(spec) == _placement_inputs(self._spec)))
        self._spec, self._comparison_operators = spec, comparison_operators
        place = node_placer(ds, comparison_operators=comparison_operators)
        if changed is None or not same_template:
            self._read_nodes(view.all(_NODE), place, same_template)
        else:
            for uid in changed:
                self._node_changed(uid, view.get(_NODE, uid), place)
        if self._recount_all:
            self._to_settle = None
        elif self._to_settle is not None:
            self._to_settle |= self._dirty
        counted_for = (hash_, _generation_label(ds), ds.spec.min_ready_seconds)
        if self._recount_all or counted_for != self._counted_for or self._now is None or now < self._now:
            self._counted_for = counted_for
            self._count_all(now)
        else:
            for name in self._dirty:
                for uid in self._uids_by_name.get(name, ()):
                    self._count(uid, now)
            for uid in [uid for uid, due in self._waiting.items() if due <= now]:
                self._count(uid, now)
        self._recount_all, self._now = False, now
        self._dirty = set()

    def _take(self, facts: PodFacts, matched: dict[int, bool]) -> None:
        """claim_facts' answer for one pod, and nodes_to_daemon_facts' for a claimed one. ``matched``: the
        selector's answers by id of a labels dict, for dicts that stay alive meanwhile."""
        assert self._owner is not None
        uid, namespace, deleting, selector = self._owner
        owner = facts.controller_uid
        if owner is not None and owner != uid:
            return  # another controller's: not even matched (a namespace's pods are mostly others', its journal too)
        labels = facts.labels
        matches = matched.get(id(labels))
        if matches is None:
            matches = matched[id(labels)] = selector.matches(labels)
        if owner is not None:
            if not matches:
                if not deleting:
                    self._released[facts.uid] = facts
                return
        elif deleting or facts.deleting or not matches or (
                namespace and namespace != facts.pod.metadata.namespace):
            return
        else:
            self._adopted[facts.uid] = facts
        self._claimed[facts.uid] = facts
        node = facts.node
        if node is None or (facts.deleting and facts.terminal):
            return
        self._unchecked[facts.uid] = facts
        same_node = self.by_node.get(node)
        if same_node is None:
            self.by_node[node] = [facts]
        else:
            same_node.append(facts)
            same_node.sort(key=facts_order_key)
        self._dirty.add(node)

    def _unplace(self, facts: PodFacts) -> None:
        node = facts.node
        same_node = None if node is None else self.by_node.get(node)
        if same_node is None:
            return
        for i, other in enumerate(same_node):
            if other is facts:
                del same_node[i]
                self._outdated.discard(facts.uid)
                self._unchecked.pop(facts.uid, None)
                if not same_node:
                    del self.by_node[node]  # type: ignore[arg-type]
                self._dirty.add(node)  # type: ignore[arg-type]
                return

    def _read_nodes(self, nodes: Iterable[Node], place: Placer, same_template: bool) -> None:
        """Every cached node and its placement, kept for a node object seen before when the template is the same."""
        known, placements = self._nodes, self._placements
        self._nodes, self._uids_by_name, self._placements = {}, {}, {}
        self._recount_all = True
        for node in nodes:
            uid = node.metadata.uid
            kept = same_template and known.get(uid) is node
            self._add_node(uid, node, placements[uid] if kept else place(node))

    def _node_changed(self, uid: str, node: Node | None, place: Placer) -> None:
        old = self._nodes.pop(uid, None)
        if old is not None:
            self._uncount(uid)
            del self._placements[uid]
            same_name = self._uids_by_name[old.metadata.name]
            same_name.remove(uid)
            if not same_name:
                del self._uids_by_name[old.metadata.name]
            self._dirty.add(old.metadata.name)  # its name's placement, or the name itself, may be gone
        if node is not None:
            self._add_node(uid, node, place(node))
            self._dirty.add(node.metadata.name)

    def _add_node(self, uid: str, node: Node, placement: Placement) -> None:
        self._nodes[uid] = node
        self._uids_by_name.setdefault(node.metadata.name, []).append(uid)
        self._placements[uid] = placement

    def _settle_all(self) -> None:
        """manage's inputs for every node name (see :meth:`manage_inputs`)."""
        placements, by_node = self._placements, self.by_node
        self._placed = placed = {name: placements[uids[-1]] for name, uids in sorted(self._uids_by_name.items())}
        self._unsettled = {name for name, placement in placed.items() if not is_settled(placement, by_node.get(name))}

    def _settle(self, names: Iterable[str]) -> None:
        """manage's inputs again for the node names whose placement or pods changed."""
        placed, unsettled = self._placed, self._unsettled
        added = False
        for name in names:
            uids = self._uids_by_name.get(name)
            if uids is None:
                placed.pop(name, None)
                unsettled.discard(name)
                continue
            added = added or name not in placed
            placement = placed[name] = self._placements[uids[-1]]
            if is_settled(placement, self.by_node.get(name)):
                unsettled.discard(name)
            else:
                unsettled.add(name)
        if added:  # a new name goes to its place in name order
            self._placed = dict(sorted(placed.items()))

    def _count_all(self, now: datetime) -> None:
        """Counts every node's part of the status (in one lean loop: it runs over thousands of nodes)."""
        assert self._counted_for is not None
        hash_, generation_label, min_ready = self._counted_for
        by_node, placements = self.by_node, self._placements
        counts: dict[str, NodeCounts] = {}
        for uid, node in self._nodes.items():
            node_counted = node_counts(placements[uid], by_node.get(node.metadata.name), hash_, generation_label,
                                       min_ready, now)
            if node_counted is not NO_COUNTS:
                counts[uid] = node_counted
        self._counts = counts
        self._totals = list(summed(counts.values()))
        self._waiting = {uid: c.available_at for uid, c in counts.items() if c.available_at is not None} \
            if min_ready else {}

    def _count(self, uid: str, now: datetime) -> None:
        """(Re)counts one node's part of the status."""
        assert self._counted_for is not None
        hash_, generation_label, min_ready = self._counted_for
        counts = node_counts(self._placements[uid], self.by_node.get(self._nodes[uid].metadata.name), hash_,
                             generation_label, min_ready, now)
        old = self._counts.get(uid, NO_COUNTS)
        if counts is old:  # the usual answers are shared values: most changes to a pod leave its node's as it was
            return
        self._uncount(uid)
        if counts is NO_COUNTS:
            return
        self._counts[uid] = counts
        self._add(counts, 1)
        if counts.available_at is not None:
            self._waiting[uid] = counts.available_at

    def _uncount(self, uid: str) -> None:
        counts = self._counts.pop(uid, None)
        if counts is None:
            return
        self._add(counts, -1)
        self._waiting.pop(uid, None)

    def _add(self, counts: NodeCounts, sign: int) -> None:
        totals = self._totals
        totals[0] += sign * counts.desired
        totals[1] += sign * counts.current
        totals[2] += sign * counts.misscheduled
        totals[3] += sign * counts.ready
        totals[4] += sign * counts.available
        totals[5] += sign * counts.updated


def _placement_inputs(spec: PodSpec) -> tuple[object, ...]:
    """What NodeShouldRunDaemonPod reads of the template (reconciler.core.daemonset.placement): a new image
    keeps every node's placement."""
    return spec.node_name, spec.node_selector, spec.affinity, spec.tolerations, spec.host_network


def _generation_label(ds: DaemonSet) -> str | None:
    generation = template_generation(ds)
    return None if generation is None else str(generation)
