"""A DaemonSet's revision history (update.go's getPatch, constructHistory, dedupCurHistories, snapshot and
cleanupHistory; history/controller_history.go's hashing, naming, EqualRevision and SortControllerRevisions).

The getPatch fixture and every expected hash below were produced by Go itself (encoding/json and hash/fnv
of the Go 1.19 standard library) running upstream's getPatch and HashControllerRevision code on the
fixture DaemonSet: kubus must write and recognise the very bytes kube-controller-manager does.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from kube import codec
from kube.apps import ControllerRevision, DaemonSet
from kube.core import Pod
from kube.meta import ObjectMeta
from kube.ownership import new_controller_ref
from kube.testing import daemonset, pod
from kube.times import format_time
from reconciler.core.daemonset.history import (
    DEFAULT_REVISION_HISTORY_LIMIT,
    HISTORY_HASH_LABEL,
    UNIQUE_LABEL_KEY,
    CreateConflict,
    cleanup_history,
    construct_history,
    equal_revision,
    find_equal_revisions,
    fnv32,
    fnv32a,
    live_hashes,
    match,
    max_revision,
    new_revision,
    relabel_pod_patch,
    resolve_create_conflict,
    revision_body,
    revision_data,
    revision_data_of,
    revision_hash,
    revision_name,
    revision_number_patch,
    safe_encode_string,
    sort_controller_revisions,
    unique_label_patch,
)

# A DaemonSet as the API server returns it: defaulted template fields, "creationTimestamp": null in the
# template's metadata, fields in the Go structs' order, and strings that Go escapes (<, >, &, U+2028/9),
# quotes, backslashes, control characters and non-ASCII text.
FIXTURE_DS = r'''{"kind":"DaemonSet","apiVersion":"apps/v1","metadata":{"name":"fluentd-elasticsearch","namespace":"kube-system","uid":"6f1d2a8e-0a57-4d3c-9a51-8f8f6f0b6a11","resourceVersion":"1234","generation":1,"creationTimestamp":"2024-05-01T10:00:00Z","labels":{"k8s-app":"fluentd-logging"},"annotations":{"deprecated.daemonset.template.generation":"1"}},"spec":{"selector":{"matchLabels":{"name":"fluentd-elasticsearch"}},"template":{"metadata":{"creationTimestamp":null,"labels":{"name":"fluentd-elasticsearch"},"annotations":{"note":"a<b && c>d \u2028 \u2029 é 🌍"}},"spec":{"volumes":[{"name":"varlog","hostPath":{"path":"/var/log","type":""}}],"containers":[{"name":"fluentd-elasticsearch","image":"quay.io/fluentd_elasticsearch/fluentd:v2.5.2","env":[{"name":"QUOTE","value":"say \"hi\" \\ tab\there\nnewline"}],"resources":{"limits":{"memory":"200Mi"},"requests":{"cpu":"100m","memory":"200Mi"}},"volumeMounts":[{"name":"varlog","mountPath":"/var/log"}],"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","securityContext":{},"schedulerName":"default-scheduler","tolerations":[{"key":"node-role.kubernetes.io/control-plane","operator":"Exists","effect":"NoSchedule"}]}},"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":1,"maxSurge":0}},"revisionHistoryLimit":10},"status":{"currentNumberScheduled":0,"numberMisscheduled":0,"desiredNumberScheduled":0,"numberReady":0}}'''.encode()  # noqa: E501

# getPatch(FIXTURE_DS) as Go wrote it.
FIXTURE_PATCH = r'''{"spec":{"template":{"$patch":"replace","metadata":{"annotations":{"note":"a\u003cb \u0026\u0026 c\u003ed \u2028 \u2029 é 🌍"},"creationTimestamp":null,"labels":{"name":"fluentd-elasticsearch"}},"spec":{"containers":[{"env":[{"name":"QUOTE","value":"say \"hi\" \\ tab\there\nnewline"}],"image":"quay.io/fluentd_elasticsearch/fluentd:v2.5.2","imagePullPolicy":"IfNotPresent","name":"fluentd-elasticsearch","resources":{"limits":{"memory":"200Mi"},"requests":{"cpu":"100m","memory":"200Mi"}},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","volumeMounts":[{"mountPath":"/var/log","name":"varlog"}]}],"dnsPolicy":"ClusterFirst","restartPolicy":"Always","schedulerName":"default-scheduler","securityContext":{},"terminationGracePeriodSeconds":30,"tolerations":[{"effect":"NoSchedule","key":"node-role.kubernetes.io/control-plane","operator":"Exists"}],"volumes":[{"hostPath":{"path":"/var/log","type":""},"name":"varlog"}]}}}}'''.encode()  # noqa: E501

# A revision kube-controller-manager wrote for FIXTURE_DS, as the API server returns it. Its name and
# hash label come from ComputeHash (a go-spew dump of the Go struct), which kubus does not reproduce;
# it must still be recognised as the current revision, by its data.
KCM_REVISION = (b'{"kind":"ControllerRevision","apiVersion":"apps/v1",'
                b'"metadata":{"name":"fluentd-elasticsearch-6d8b9c4f7",'
                b'"namespace":"kube-system","uid":"0b4e8c1a-5d0e-4a0e-8b7e-3f1f7c3f2d22","resourceVersion":"1240",'
                b'"creationTimestamp":"2024-05-01T10:00:01Z","labels":{"controller-revision-hash":"6d8b9c4f7",'
                b'"name":"fluentd-elasticsearch"},"annotations":{"deprecated.daemonset.template.generation":"1"},'
                b'"ownerReferences":[{"apiVersion":"apps/v1","kind":"DaemonSet","name":"fluentd-elasticsearch",'
                b'"uid":"6f1d2a8e-0a57-4d3c-9a51-8f8f6f0b6a11","controller":true,"blockOwnerDeletion":true}]},'
                b'"data":' + FIXTURE_PATCH + b',"revision":1}')

T0 = datetime(2026, 3, 15, 12, 0, 0, tzinfo=UTC)


def fixture_ds() -> DaemonSet:
    return codec.decode(FIXTURE_DS, DaemonSet)


def ds_with_image(image: str, *, collision_count: int | None = None, name: str = "foo") -> DaemonSet:
    return daemonset(name).image(image).collision_count(collision_count).build()


def revision_of(ds: DaemonSet, number: int, *, name: str | None = None, hash_: str | None = None,
                created: datetime | None = None) -> ControllerRevision:
    """A revision of ``ds`` as snapshot makes it, optionally renamed/relabelled (e.g. one kcm wrote)."""
    data = revision_data(ds)
    revision = new_revision(ds, data, number, ds.status.collision_count)
    if hash_ is not None:
        revision.metadata.labels[UNIQUE_LABEL_KEY] = hash_
        revision.metadata.name = name or f"{ds.metadata.name}-{hash_}"
    elif name is not None:
        revision.metadata.name = name
    if created is not None:
        revision.metadata.creation_timestamp = format_time(created)
    return revision


def names(revisions: list[ControllerRevision]) -> list[str]:
    return [r.metadata.name for r in revisions]


# --- getPatch --------------------------------------------------------------------------------------------------


def test_revision_data_is_gos_get_patch_byte_for_byte() -> None:
    assert revision_data(fixture_ds()) == FIXTURE_PATCH


def test_revision_data_survives_a_round_trip_through_the_codec() -> None:
    ds = fixture_ds()
    again = codec.decode(codec.encode(ds), DaemonSet)
    assert revision_data(again) == FIXTURE_PATCH


def test_revision_data_keeps_unmodelled_and_defaulted_fields() -> None:
    data = msgspec.json.decode(revision_data(fixture_ds()))
    template = data["spec"]["template"]
    assert template["$patch"] == "replace"
    assert template["metadata"]["creationTimestamp"] is None
    assert template["spec"]["volumes"] == [{"hostPath": {"path": "/var/log", "type": ""}, "name": "varlog"}]
    assert template["spec"]["containers"][0]["terminationMessagePolicy"] == "File"
    assert list(data) == ["spec"] and list(data["spec"]) == ["template"]


def test_revision_data_follows_template_changes_only() -> None:
    ds = fixture_ds()
    changed = copy.deepcopy(ds)
    changed.spec.template.spec.containers[0].image = "fluentd:v3"
    assert revision_data(changed) != FIXTURE_PATCH
    assert b'"image":"fluentd:v3"' in revision_data(changed)
    other_fields = copy.deepcopy(ds)
    other_fields.spec.min_ready_seconds = 30
    other_fields.metadata.labels["x"] = "y"
    other_fields.status.number_ready = 3
    assert revision_data(other_fields) == FIXTURE_PATCH


def test_a_revision_written_by_kube_controller_manager_matches() -> None:
    ds = fixture_ds()
    kcm = codec.decode(KCM_REVISION, ControllerRevision)
    assert revision_data_of(kcm) == FIXTURE_PATCH
    assert match(ds, kcm)
    plan = construct_history(ds, [kcm])
    assert plan.create is None and plan.current is not None
    assert plan.current.metadata.name == "fluentd-elasticsearch-6d8b9c4f7"
    assert plan.hash == "6d8b9c4f7"  # the pods are compared with kcm's hash label, not a recomputed one
    assert plan.revision_bump is None and not plan.label_fixes and not plan.deletes


def test_a_changed_template_does_not_match_the_kcm_revision() -> None:
    ds = fixture_ds()
    ds.spec.template.spec.containers[0].image = "fluentd:v3"
    kcm = codec.decode(KCM_REVISION, ControllerRevision)
    assert not match(ds, kcm)
    plan = construct_history(ds, [kcm])
    assert plan.create is not None and plan.create.revision == 2
    assert names(plan.old) == ["fluentd-elasticsearch-6d8b9c4f7"]


@pytest.mark.parametrize(("data", "expected"), [
    pytest.param(None, b"", id="null-data-is-no-bytes"),
    pytest.param({"b": 1, "a": [1, "<&>"]}, b'{"a":[1,"\\u003c\\u0026\\u003e"],"b":1}',
                 id="decoded-re-encoded-the-go-way"),
    pytest.param(msgspec.Raw(b'{"z":1,"a":2}'), b'{"z":1,"a":2}', id="raw-bytes-as-they-are"),
])
def test_revision_data_of(data: object, expected: bytes) -> None:
    assert revision_data_of(ControllerRevision(data=data)) == expected


def test_a_revision_without_data_never_matches() -> None:
    assert not match(fixture_ds(), ControllerRevision(metadata=ObjectMeta(name="x"), data=None))


# --- hashing and naming ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "fnv1", "fnv1a"), [
    # Go's hash/fnv golden32 and golden32a tables
    (b"", 0x811C9DC5, 0x811C9DC5),
    (b"a", 0x050C5D7E, 0xE40C292C),
    (b"ab", 0x70772D38, 0x4D2505CA),
    (b"abc", 0x439C2F4B, 0x1A47E90B),
])
def test_fnv_matches_gos_golden_values(text: bytes, fnv1: int, fnv1a: int) -> None:
    assert fnv32(text) == fnv1
    assert fnv32a(text) == fnv1a


@pytest.mark.parametrize(("text", "encoded"), [
    ("0123456789", "456789bcdf"),
    ("2166136261", "65bb57b6b5"),
    ("", ""),
])
def test_safe_encode_string(text: str, encoded: str) -> None:
    assert safe_encode_string(text) == encoded


@pytest.mark.parametrize(("data", "collision_count", "expected"), [
    # HashControllerRevision as Go computed it
    (FIXTURE_PATCH, None, "c884578d"),
    (FIXTURE_PATCH, 0, "549fd66f4d"),
    (FIXTURE_PATCH, 1, "549fd66f4f"),
    (FIXTURE_PATCH, 7, "549fd66f4c"),
    (FIXTURE_PATCH, 2147483647, "558c98845b"),
    (b"", None, "65bb57b6b5"),
    (b"a", None, "d8bfb88b"),
    (b"ab", None, "5ddbd9d996"),
    (b"abc", None, "557874f5f9"),
    (b'{"spec":{}}', None, "6d4c5b5d8d"),
])
def test_revision_hash_is_hash_controller_revision(data: bytes, collision_count: int | None, expected: str) -> None:
    assert revision_hash(data, collision_count) == expected


def test_revision_hash_depends_on_data_and_collision_count() -> None:
    hashes = {revision_hash(FIXTURE_PATCH, c) for c in (None, 0, 1, 2, 3)}
    assert len(hashes) == 5
    assert revision_hash(FIXTURE_PATCH + b" ", None) != revision_hash(FIXTURE_PATCH, None)


@pytest.mark.parametrize(("prefix", "expected"), [
    ("foo", "foo-abc"),
    ("a" * 223, "a" * 223 + "-abc"),
    ("a" * 224, "a" * 223 + "-abc"),
    ("b" * 250, "b" * 223 + "-abc"),
])
def test_revision_name(prefix: str, expected: str) -> None:
    assert revision_name(prefix, "abc") == expected


def test_new_revision_is_snapshots_object() -> None:
    ds = fixture_ds()
    ds.metadata.annotations["team"] = "logging"
    ds.status.collision_count = 1
    data = revision_data(ds)
    revision = new_revision(ds, data, 4, ds.status.collision_count)
    hash_ = revision_hash(data, 1)
    assert hash_ == "549fd66f4f"
    assert revision.metadata.name == f"fluentd-elasticsearch-{hash_}"
    assert revision.metadata.namespace == "kube-system"
    assert revision.metadata.labels == {"name": "fluentd-elasticsearch", UNIQUE_LABEL_KEY: hash_}
    assert revision.metadata.annotations == {"deprecated.daemonset.template.generation": "1", "team": "logging"}
    assert revision.metadata.owner_references == [new_controller_ref(ds.metadata, "apps/v1", "DaemonSet")]
    assert revision.metadata.owner_references[0].controller is True
    assert revision.metadata.owner_references[0].block_owner_deletion is True
    assert revision.revision == 4
    assert revision_data_of(revision) == data
    assert match(ds, revision)
    # the template's labels are copied, not shared
    assert "controller-revision-hash" not in ds.spec.template.metadata.labels


def test_revision_body_embeds_the_data_bytes_verbatim() -> None:
    ds = fixture_ds()
    data = revision_data(ds)
    revision = new_revision(ds, data, 1, None)
    body = revision_body(revision, data)
    assert b'"data":' + FIXTURE_PATCH + b',"revision":1}' in body
    decoded = codec.decode(body, ControllerRevision)
    assert decoded.metadata.name == "fluentd-elasticsearch-c884578d"
    assert decoded.revision == 1 and match(ds, decoded)
    raw = msgspec.json.decode(body)
    assert raw["apiVersion"] == "apps/v1" and raw["kind"] == "ControllerRevision"


# --- EqualRevision, FindEqualRevisions, SortControllerRevisions ---------------------------------------------


def history_revision(ds: DaemonSet, number: int, collision_count: int | None = 0) -> ControllerRevision:
    """history.NewControllerRevision (the StatefulSet flavour): labelled with controller.kubernetes.io/hash."""
    data = revision_data(ds)
    hash_ = revision_hash(data, collision_count)
    return ControllerRevision(
        metadata=ObjectMeta(name=revision_name(ds.metadata.name, hash_), namespace=ds.metadata.namespace,
                            labels={**ds.spec.template.metadata.labels, HISTORY_HASH_LABEL: hash_},
                            owner_references=[new_controller_ref(ds.metadata, "apps/v1", "DaemonSet")]),
        data=msgspec.json.decode(data), revision=number)


SS1 = daemonset("ss1").selector(foo="bar").build()
SS2 = daemonset("ss2").selector(goo="car").build()
SS1_REV1 = history_revision(SS1, 1)
SS1_REV2 = history_revision(SS1, 2)
SS2_REV1 = history_revision(SS2, 1)
SS2_REV2 = history_revision(SS2, 2)


@pytest.mark.parametrize(("needle", "revisions", "want"), [
    pytest.param(SS1_REV1, [SS1_REV1, SS2_REV1, SS2_REV2], [SS1_REV1], id="finds-equivalent"),
    pytest.param(SS1_REV1, [], [], id="finds-nothing-when-empty"),
    pytest.param(SS1_REV1, [SS2_REV2, SS2_REV1], [], id="finds-nothing-with-no-matches"),
    pytest.param(SS1_REV1, [SS2_REV1, SS1_REV2, SS1_REV1], [SS1_REV2, SS1_REV1], id="keeps-the-given-order"),
])
def test_find_equal_revisions(needle: ControllerRevision, revisions: list[ControllerRevision],
                              want: list[ControllerRevision]) -> None:
    assert find_equal_revisions(revisions, needle) == want


def test_equal_revision_compares_int32_hash_labels_first() -> None:
    left, right = copy.deepcopy(SS1_REV1), copy.deepcopy(SS1_REV1)
    assert equal_revision(left, right)
    left.metadata.labels[HISTORY_HASH_LABEL], right.metadata.labels[HISTORY_HASH_LABEL] = "123", "124"
    assert not equal_revision(left, right)  # both parse as int32 and differ
    right.metadata.labels[HISTORY_HASH_LABEL] = "+123"
    assert equal_revision(left, right)  # ParseInt reads "+123" as 123
    right.metadata.labels[HISTORY_HASH_LABEL] = "4294967295"
    assert equal_revision(left, right)  # out of int32 range: not compared, the data decides
    right.metadata.labels[HISTORY_HASH_LABEL] = "5d8b9c"
    assert equal_revision(left, right)  # not a number: the data decides
    assert not equal_revision(SS1_REV1, SS2_REV1)
    assert equal_revision(None, None)
    assert not equal_revision(SS1_REV1, None)
    assert not equal_revision(None, SS1_REV1)


def _named(revision: ControllerRevision, name: str, created: datetime | None = None) -> ControllerRevision:
    other = copy.deepcopy(revision)
    other.metadata.name = name
    other.metadata.creation_timestamp = format_time(created) if created else None
    return other


REV1 = _named(history_revision(SS1, 1), "rev1", T0)
REV2 = _named(history_revision(SS1, 2), "rev2", T0)
REV3 = _named(history_revision(SS1, 3), "rev3", T0)
REV3_TIME2 = _named(history_revision(SS1, 3), "rev3-time2", T0 + timedelta(seconds=1))
REV3_TIME2_NAME2 = _named(history_revision(SS1, 3), "rev3-time2-name2", T0 + timedelta(seconds=1))
REV3_NO_TIME = _named(history_revision(SS1, 3), "rev3-zero-time")


@pytest.mark.parametrize(("revisions", "want"), [
    pytest.param([REV2, REV1, REV3], ["rev1", "rev2", "rev3"], id="out-of-order"),
    pytest.param([REV1, REV2, REV3], ["rev1", "rev2", "rev3"], id="sorted"),
    pytest.param([REV3, REV2, REV1], ["rev1", "rev2", "rev3"], id="reversed"),
    pytest.param([REV3_TIME2_NAME2, REV3, REV3_TIME2, REV2, REV1],
                 ["rev1", "rev2", "rev3", "rev3-time2", "rev3-time2-name2"], id="with-ties"),
    pytest.param([REV3, REV3_NO_TIME], ["rev3-zero-time", "rev3"], id="zero-time-first"),
    pytest.param([], [], id="empty"),
])
def test_sort_controller_revisions(revisions: list[ControllerRevision], want: list[str]) -> None:
    assert names(sort_controller_revisions(revisions)) == want


def test_max_revision() -> None:
    assert max_revision([]) == 0
    assert max_revision([REV2, REV1, REV3]) == 3
    assert max_revision([ControllerRevision(revision=-4)]) == 0


# --- constructHistory -------------------------------------------------------------------------------------


V1 = ds_with_image("img:v1")
V2 = ds_with_image("img:v2")
V3 = ds_with_image("img:v3")


def daemon_pod(name: str, hash_: str | None) -> Pod:
    builder = pod(name).labels(app="foo")
    return (builder.labels({UNIQUE_LABEL_KEY: hash_}) if hash_ is not None else builder).build()


def test_first_revision_is_created_with_number_one() -> None:
    plan = construct_history(V1, [])
    data = revision_data(V1)
    hash_ = revision_hash(data, None)
    assert plan.create is not None and plan.current is plan.create
    assert plan.create.revision == 1
    assert plan.create.metadata.name == f"foo-{hash_}"
    assert plan.hash == hash_ == plan.create.metadata.labels[UNIQUE_LABEL_KEY]
    assert plan.data == data
    assert plan.old == [] and plan.collision_count is None
    assert not plan.deletes and not plan.pod_relabels and plan.revision_bump is None


def test_new_revision_numbers_follow_the_highest_old_one() -> None:
    old = [revision_of(V1, 1), revision_of(V2, 5)]
    plan = construct_history(V3, old)
    assert plan.create is not None and plan.create.revision == 6
    assert sorted(names(plan.old)) == sorted(names(old))


def test_the_hash_includes_the_collision_count() -> None:
    counted = ds_with_image("img:v1", collision_count=2)
    plan = construct_history(counted, [])
    assert plan.create is not None
    assert plan.hash == revision_hash(revision_data(counted), 2) != revision_hash(revision_data(counted), None)


def test_current_revision_is_renumbered_when_an_old_one_is_newer() -> None:
    # rolled back to v1: its revision (1) is older than v2's (2), so it becomes 3
    v1 = revision_of(V1, 1)
    plan = construct_history(V1, [v1, revision_of(V2, 2)])
    assert plan.create is None
    assert plan.revision_bump == (v1, 3)
    assert plan.current is not None and plan.current.revision == 3 and plan.current.metadata.name == v1.metadata.name
    assert v1.revision == 1  # inputs are not mutated
    assert plan.hash == v1.metadata.labels[UNIQUE_LABEL_KEY]
    assert names(plan.old) == [revision_of(V2, 2).metadata.name]


def test_current_revision_already_newest_needs_nothing() -> None:
    current = revision_of(V2, 2)
    plan = construct_history(V2, [revision_of(V1, 1), current])
    assert plan.current == current and plan.revision_bump is None and plan.create is None
    assert not plan.label_fixes and not plan.deletes and not plan.pod_relabels


def test_duplicates_keep_the_highest_revision_relabel_pods_and_go() -> None:
    low = revision_of(V2, 2, hash_="lowhash")
    high = revision_of(V2, 4, hash_="highhash")
    old = revision_of(V1, 3)
    old_hash = old.metadata.labels[UNIQUE_LABEL_KEY]
    pods = [daemon_pod("p-low", "lowhash"), daemon_pod("p-high", "highhash"), daemon_pod("p-old", old_hash),
            daemon_pod("p-none", None)]
    plan = construct_history(V2, [high, old, low], pods)
    assert plan.current == high and plan.hash == "highhash"
    assert plan.deletes == [low]
    # every pod not carrying the kept hash, old revisions' pods too, exactly as upstream
    assert [p.metadata.name for p in plan.pod_relabels] == ["p-low", "p-old", "p-none"]
    assert plan.revision_bump is None  # 4 is already past max(old) + 1 == 4
    assert plan.old == [old]


def test_duplicates_then_renumbered() -> None:
    a = revision_of(V2, 1, hash_="aaa")
    b = revision_of(V2, 2, hash_="bbb")
    plan = construct_history(V2, [a, b, revision_of(V1, 5)], [daemon_pod("p", "aaa")])
    assert plan.deletes == [a]
    assert plan.revision_bump == (b, 6)
    assert plan.current is not None and plan.current.revision == 6 and plan.hash == "bbb"
    assert [p.metadata.name for p in plan.pod_relabels] == ["p"]


def test_duplicates_with_equal_numbers_keep_the_last_by_name() -> None:
    a = revision_of(V2, 3, hash_="aaa")
    b = revision_of(V2, 3, hash_="bbb")
    for revisions in ([a, b], [b, a]):
        plan = construct_history(V2, revisions)
        assert plan.current == b and plan.deletes == [a]


def test_a_single_current_revision_relabels_nothing() -> None:
    current = revision_of(V2, 1)
    plan = construct_history(V2, [current], [daemon_pod("p", "something-else")])
    assert plan.pod_relabels == [] and plan.deletes == []


def test_the_upstream_dedup_scenario() -> None:
    # TestDSCUpdatesPodLabelAfterDedupCurHistories: a second revision with the same data, a higher
    # revision number and another hash appears; the pod moves to its hash and the first one goes.
    first = revision_of(V1, 1)
    newer = revision_of(V1, 2, hash_="newhash")
    running = daemon_pod("foo-x", first.metadata.labels[UNIQUE_LABEL_KEY])
    plan = construct_history(V1, [first, newer], [running])
    assert plan.hash == "newhash" and plan.deletes == [first]
    assert plan.pod_relabels == [running]
    assert relabel_pod_patch(plan.hash) == b'{"metadata":{"labels":{"controller-revision-hash":"newhash"}}}'


def test_revisions_without_the_unique_label_get_their_name() -> None:
    unlabelled_old = revision_of(V1, 1, name="foo-legacy-1")
    del unlabelled_old.metadata.labels[UNIQUE_LABEL_KEY]
    unlabelled_current = revision_of(V2, 2, name="foo-legacy-2")
    del unlabelled_current.metadata.labels[UNIQUE_LABEL_KEY]
    plan = construct_history(V2, [unlabelled_current, unlabelled_old])
    assert [r.metadata.labels[UNIQUE_LABEL_KEY] for r in plan.label_fixes] == ["foo-legacy-1", "foo-legacy-2"]
    assert plan.hash == "foo-legacy-2"
    assert plan.old[0].metadata.labels[UNIQUE_LABEL_KEY] == "foo-legacy-1"
    assert UNIQUE_LABEL_KEY not in unlabelled_old.metadata.labels  # inputs are not mutated
    assert (unique_label_patch(plan.label_fixes[0])
            == b'{"metadata":{"labels":{"controller-revision-hash":"foo-legacy-1"}}}')


def test_a_name_taken_by_different_data_bumps_the_collision_count() -> None:
    for count, bumped in ((None, 1), (0, 1), (2, 3)):
        ds = ds_with_image("img:v2", collision_count=count)
        squatter = revision_of(V1, 7, name=new_revision(ds, revision_data(ds), 1, count).metadata.name)
        plan = construct_history(ds, [], taken={squatter.metadata.name: squatter})
        assert plan.collision_count == bumped
        assert plan.create is None and plan.current is None and plan.hash is None
        # also when the squatter is among the DaemonSet's own revisions
        plan = construct_history(ds, [squatter])
        assert plan.collision_count == bumped and plan.old == [squatter]


def test_a_name_taken_by_the_same_data_is_the_current_revision() -> None:
    existing = revision_of(V2, 1)
    existing.metadata.owner_references = []  # e.g. an orphan the DaemonSet does not select
    plan = construct_history(V2, [revision_of(V1, 4)], taken={existing.metadata.name: existing})
    assert plan.create is None and plan.collision_count is None
    assert plan.current == existing and plan.revision_bump is None  # snapshot returns it as it is
    assert plan.hash == existing.metadata.labels[UNIQUE_LABEL_KEY]


def test_resolve_create_conflict() -> None:
    ds = ds_with_image("img:v2", collision_count=4)
    same = revision_of(ds, 1)
    assert resolve_create_conflict(ds, same) == CreateConflict(current=same)
    assert resolve_create_conflict(ds, revision_of(V1, 1)) == CreateConflict(collision_count=5)


def test_revision_number_patch() -> None:
    assert revision_number_patch(12) == b'{"revision":12}'


# --- cleanupHistory ---------------------------------------------------------------------------------------


def numbered(count: int, ds: DaemonSet = V1) -> list[ControllerRevision]:
    return [revision_of(ds, n, name=f"old-{n}", hash_=f"h{n}") for n in range(1, count + 1)]


@pytest.mark.parametrize(("count", "limit", "live", "doomed"), [
    pytest.param(5, 2, set(), ["old-1", "old-2", "old-3"], id="oldest-first"),
    pytest.param(5, 5, set(), [], id="at-the-limit"),
    pytest.param(3, 5, set(), [], id="under-the-limit"),
    pytest.param(5, 0, set(), ["old-1", "old-2", "old-3", "old-4", "old-5"], id="keep-none"),
    pytest.param(5, 2, {"h1", "h3"}, ["old-2", "old-4", "old-5"], id="live-pods-protect-their-revisions"),
    pytest.param(5, 2, {"h1", "h2", "h3", "h4"}, ["old-5"], id="protected-ones-do-not-count-as-kept"),
    pytest.param(5, 2, {"h1", "h2", "h3", "h4", "h5"}, [], id="all-live"),
    pytest.param(4, -1, set(), ["old-1", "old-2", "old-3", "old-4"], id="negative-limit"),
])
def test_cleanup_history(count: int, limit: int, live: set[str], doomed: list[str]) -> None:
    olds = numbered(count)
    assert names(cleanup_history(V1, list(reversed(olds)), live, limit)) == doomed


def test_cleanup_history_limit_comes_from_the_daemonset() -> None:
    olds = numbered(13)
    assert names(cleanup_history(V1, olds, [])) == ["old-1", "old-2", "old-3"]  # the builder's 10
    limited = daemonset("foo").revision_history_limit(1).build()
    assert len(cleanup_history(limited, olds, [])) == 12
    unset = daemonset("foo").revision_history_limit(None).build()
    assert len(cleanup_history(unset, olds, [])) == 13 - DEFAULT_REVISION_HISTORY_LIMIT


def test_cleanup_history_never_matches_an_unlabelled_revision_to_unlabelled_pods() -> None:
    olds = numbered(3)
    del olds[0].metadata.labels[UNIQUE_LABEL_KEY]
    hashes = live_hashes([daemon_pod("a", None), daemon_pod("b", ""), daemon_pod("c", "h2")])
    assert hashes == {"h2"}
    assert names(cleanup_history(V1, olds, hashes, 1)) == ["old-1", "old-3"]


def test_cleanup_history_breaks_revision_ties_by_creation_time_then_name() -> None:
    a = revision_of(V1, 1, name="b-later", hash_="x1", created=T0 + timedelta(seconds=5))
    b = revision_of(V1, 1, name="c-earlier", hash_="x2", created=T0)
    c = revision_of(V1, 1, name="a-earlier", hash_="x3", created=T0)
    assert names(cleanup_history(V1, [a, b, c], [], 1)) == ["a-earlier", "c-earlier"]
