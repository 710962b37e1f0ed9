"""ClaimPods (controller_ref_manager_test.go TestClaimPods) and GetPodFromTemplate (controller_utils_test.go)."""

from __future__ import annotations

import re

import pytest

from kube import codec
from kube.apps import ReplicaSet
from kube.core import Pod
from kube.labels import Selector, selector_from_set
from kube.meta import ObjectMeta, OwnerReference
from kube.names import ALPHABET, MAX_GENERATED_NAME_LENGTH
from kube.ownership import new_controller_ref
from kube.pods import pod_facts
from kube.template import PodTemplateSpec
from kube.testing import pod, replicaset
from kube.times import format_time
from messages.actions import IDEMPOTENCY_ANNOTATION
from messages.naming import generated_name
from reconciler.core.claiming import Claim, claim_pod_facts, claim_pods
from reconciler.core.podtemplate import pod_from_template, pods_prefix
from tests.reconciler.builders import NOW, names

PRODUCTION = {"type": "production"}
TESTING = {"type": "testing"}
SELECTOR = selector_from_set(PRODUCTION)


def controller(uid: str = "123", namespace: str = "default", deleting: bool = False) -> ObjectMeta:
    return ObjectMeta(name="ctrl", namespace=namespace, uid=uid,
                      deletion_timestamp=format_time(NOW) if deleting else None)


def make(name: str, labels: dict[str, str], owner: ObjectMeta | None = None, *, namespace: str = "default",
         deleting: bool = False) -> Pod:
    """controller_ref_manager_test.go's newPod: labels, and a controller reference to `owner` if given."""
    built = pod(name).ns(namespace).labels(labels).build()
    if owner is not None:
        built.metadata.owner_references = [new_controller_ref(owner, "apps/v1", "Fake")]
    if deleting:
        built.metadata.deletion_timestamp = format_time(NOW)
    return built


CTRL = controller()
DELETING = controller(deleting=True)
OTHER = controller(uid="AAAAA")
CLUSTER_SCOPED = controller(namespace="")


@pytest.mark.parametrize(
    ("ctrl", "pods", "claimed", "adopt", "release"),
    [
        pytest.param(CTRL, [make("pod1", PRODUCTION), make("pod2", TESTING)], ["pod1"], ["pod1"], [],
                     id="claim-pods-with-correct-label"),
        pytest.param(DELETING, [make("pod1", PRODUCTION), make("pod2", PRODUCTION)], [], [], [],
                     id="controller-being-deleted-can-not-claim-pods"),
        pytest.param(DELETING, [make("pod1", PRODUCTION, DELETING), make("pod2", PRODUCTION)], ["pod1"], [], [],
                     id="controller-being-deleted-keeps-its-own-pods-but-claims-no-new-ones"),
        pytest.param(CTRL, [make("pod1", PRODUCTION, CTRL), make("pod2", PRODUCTION, OTHER)], ["pod1"], [], [],
                     id="can-not-claim-pods-owned-by-another-controller"),
        pytest.param(CTRL, [make("pod1", PRODUCTION, CTRL), make("pod2", TESTING, CTRL)], ["pod1"], [], ["pod2"],
                     id="releases-own-pods-the-selector-no-longer-matches"),
        pytest.param(DELETING, [make("pod1", TESTING, DELETING)], [], [], [],
                     id="controller-being-deleted-does-not-release"),
        pytest.param(CTRL, [make("pod1", PRODUCTION, CTRL, deleting=True), make("pod2", PRODUCTION, deleting=True)],
                     ["pod1"], [], [], id="does-not-adopt-orphans-being-deleted"),
        pytest.param(CTRL, [make("pod1", PRODUCTION, CTRL), make("pod2", TESTING, CTRL), make("pod3", PRODUCTION)],
                     ["pod1", "pod3"], ["pod3"], ["pod2"], id="claims-and-releases-by-selector"),
        pytest.param(CTRL, [make("pod1", PRODUCTION), make("pod2", PRODUCTION, namespace="fakens")], ["pod1"],
                     ["pod1"], [], id="does-not-adopt-pods-of-another-namespace"),
        pytest.param(CLUSTER_SCOPED, [make("pod1", PRODUCTION), make("pod2", PRODUCTION, namespace="fakens")],
                     ["pod1", "pod2"], ["pod1", "pod2"], [], id="cluster-scoped-controller-adopts-in-any-namespace"),
        pytest.param(CTRL, [], [], [], [], id="no-pods"),
    ],
)
@pytest.mark.parametrize("claim_of", ["pods", "facts"])
def test_claim_pods(ctrl: ObjectMeta, pods: list[Pod], claimed: list[str], adopt: list[str],
                    release: list[str], claim_of: str) -> None:
    """Each pod is ours (claimed), adoptable (a patch, then claimed), to release (a patch), or ignored; the
    same over the pods' facts (claim_pod_facts: the DaemonSet's claim, issue 25)."""
    claim = claim_pods(ctrl, SELECTOR, pods) if claim_of == "pods" else claim_pod_facts(
        ctrl, SELECTOR, [pod_facts(p) for p in pods])
    assert (names(claim.claimed), names(claim.adopt), names(claim.release)) == (claimed, adopt, release)


def test_claimed_pods_keep_input_order_and_identity() -> None:
    pods = [make("b", PRODUCTION), make("a", PRODUCTION, CTRL), make("c", PRODUCTION)]
    for claim in claim_pods(CTRL, SELECTOR, pods), claim_pod_facts(CTRL, SELECTOR, [pod_facts(p) for p in pods]):
        assert claim.claimed == pods
        assert claim.claimed[0] is pods[0]


@pytest.mark.parametrize(
    ("selector", "claimed", "release"),
    [
        pytest.param(Selector(matches_nothing=True), [], ["mine"], id="nothing-selector-releases-everything"),
        pytest.param(selector_from_set({}), ["mine", "orphan", "other-labels"], [], id="everything-selector"),
    ],
)
def test_claim_with_degenerate_selectors(selector: Selector, claimed: list[str], release: list[str]) -> None:
    """LabelSelectorAsSelector(nil) is Nothing: a ReplicaSet without a selector releases what it owns."""
    pods = [make("mine", PRODUCTION, CTRL), make("orphan", PRODUCTION), make("other-labels", TESTING)]
    for claim in claim_pods(CTRL, selector, pods), claim_pod_facts(CTRL, selector, [pod_facts(p) for p in pods]):
        assert (names(claim.claimed), names(claim.release)) == (claimed, release)


def test_filters_apply_after_the_selector() -> None:
    """ClaimPods' filters: a pod failing one is treated as not matching (released if ours)."""
    pods = [make("keep", PRODUCTION, CTRL), make("drop", PRODUCTION, CTRL), make("orphan-drop", PRODUCTION)]
    claim = claim_pods(CTRL, SELECTOR, pods, filters=[lambda p: p.metadata.name == "keep"])
    assert claim == Claim(claimed=[pods[0]], adopt=[], release=[pods[1]])


# --- GetPodFromTemplate -------------------------------------------------------------------------------

NAME = re.compile(rf"^foobar-[{ALPHABET}]{{5}}$")


def rs_with_template() -> ReplicaSet:
    template = codec.decode_builtin({
        "metadata": {"labels": {"name": "foo", "type": "production"}, "annotations": {"a": "b"},
                     "finalizers": ["example.com/keep"]},
        "spec": {"containers": [{"name": "main", "image": "foo/bar", "terminationMessagePath": "/dev/x"}],
                 "restartPolicy": "Always", "dnsPolicy": "Default", "nodeSelector": {"baz": "blah"},
                 "volumes": [{"name": "data", "emptyDir": {}}]},
    }, PodTemplateSpec)
    return replicaset("foobar").template(template).build()


def test_pod_from_template_is_upstreams_pod() -> None:
    """TestCreatePods / TestCreatePodsWithGenerateName: labels, annotations, finalizers, the controller
    reference and the template's spec; the name is generateName plus five characters from the key."""
    rs = rs_with_template()
    ref = new_controller_ref(rs.metadata, "apps/v1", "ReplicaSet")
    body = pod_from_template(rs.spec.template, rs.metadata.name, ref, "default", "corr/create/0")
    meta = body["metadata"]
    assert NAME.match(meta["name"]), meta["name"]
    assert {k: v for k, v in meta.items() if k != "name"} == {
        "generateName": "foobar-",
        "namespace": "default",
        "labels": {"name": "foo", "type": "production"},
        "annotations": {"a": "b", IDEMPOTENCY_ANNOTATION: "corr/create/0"},
        "finalizers": ["example.com/keep"],
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "foobar", "uid": rs.metadata.uid,
                             "controller": True, "blockOwnerDeletion": True}],
    }
    assert (body["apiVersion"], body["kind"]) == ("v1", "Pod")
    assert body["spec"] == rs.spec.template.to_builtins()["spec"]
    assert body["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]  # unmodelled fields survive


def test_pod_from_template_without_controller_ref_or_labels() -> None:
    template = PodTemplateSpec()
    body = pod_from_template(template, "foobar", None, "ns", "k")
    assert "ownerReferences" not in body["metadata"]
    assert "labels" not in body["metadata"]
    assert "finalizers" not in body["metadata"]
    assert body["metadata"]["annotations"] == {IDEMPOTENCY_ANNOTATION: "k"}


def test_pod_names_follow_idempotency_keys() -> None:
    """A retried create (same key) names the same pod; another key names another pod."""
    rs = rs_with_template()
    first = pod_from_template(rs.spec.template, "foobar", None, "default", "corr/create/0")
    again = pod_from_template(rs.spec.template, "foobar", None, "default", "corr/create/0")
    other = pod_from_template(rs.spec.template, "foobar", None, "default", "corr/create/1")
    assert first == again
    assert first["metadata"]["name"] != other["metadata"]["name"]
    assert generated_name("foobar-", "corr/create/0") == first["metadata"]["name"]


@pytest.mark.parametrize(
    ("name", "prefix"),
    [
        pytest.param("foobar", "foobar-", id="dash-appended"),
        pytest.param("a" * 252, "a" * 252 + "-", id="longest-name-that-takes-a-dash"),
        pytest.param("a" * 253, "a" * 253, id="too-long-for-a-dash"),
    ],
)
def test_pods_prefix(name: str, prefix: str) -> None:
    """getPodsPrefix: ``name-`` when it is a valid generateName (trailing dash masked), else the name."""
    assert pods_prefix(name) == prefix


def test_generated_names_truncate_the_prefix() -> None:
    """SimpleNameGenerator: the prefix is cut to 58 characters before the 5 random ones."""
    name = generated_name("x" * 70 + "-", "k")
    assert len(name) == 63
    assert name[:MAX_GENERATED_NAME_LENGTH] == "x" * 58
    assert all(c in ALPHABET for c in name[58:])


def test_controller_ref_of_pods_is_the_replicasets() -> None:
    rs = replicaset("web").build()
    ref = new_controller_ref(rs.metadata, "apps/v1", "ReplicaSet")
    assert ref == OwnerReference(api_version="apps/v1", kind="ReplicaSet", name="web", uid=rs.metadata.uid,
                                 controller=True, block_owner_deletion=True)


class CountingLabels(dict[str, str]):
    """A pod's labels that count how often a selector reads them (`pairs <= labels.items()`)."""

    reads = 0

    def items(self):  # type: ignore[override]
        self.reads += 1
        return super().items()


def test_claim_active_asks_the_selector_once_per_shared_labels_dict() -> None:
    """The reconciler's cache gives pods with equal labels one dict (Cache._shared_labels): a ReplicaSet's
    thousands of pods are matched against its selector once per dict, not once per pod, in every sync; the
    outcome is the per-pod one (an orphan with another dict in between, a pod that does not match)."""
    from reconciler.core.claiming import claim_active

    ours, other = CountingLabels(PRODUCTION), CountingLabels(TESTING)
    facts = [pod_facts(make(f"pod{i}", PRODUCTION, CTRL), ours) for i in range(300)]
    facts.insert(150, pod_facts(make("orphan", PRODUCTION), ours))
    facts.insert(100, pod_facts(make("released", TESTING, CTRL), other))
    claim = claim_active(CTRL, SELECTOR, facts)
    assert len(claim.claimed) == 301
    assert names(claim.adopt) == ["orphan"]
    assert names(claim.release) == ["released"]
    assert (ours.reads, other.reads) == (2, 1)  # ours read again after the other dict came between
