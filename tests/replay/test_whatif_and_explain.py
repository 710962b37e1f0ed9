"""What-if replays (a changed spec, a node taken away or added, a tainted node) and `--explain`'s account
of a sync: per node for a DaemonSet, the diff and the ranking for a ReplicaSet."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from replay.bundles import Bundle
from replay.report import Replay, ReplayOptions
from replay.source import Window
from replay.whatif import NamedObject, WhatIf, WhatIfError, parse_add_node, parse_path, parse_set, parse_target
from tests.replay.conftest import NAMESPACE

AGENT = NamedObject(("DaemonSet", "ReplicaSet"), NAMESPACE, "agent")
WEB = NamedObject(("DaemonSet", "ReplicaSet"), NAMESPACE, "web")


def replay(bundles: list[Bundle], **options: Any) -> tuple[Replay, list[dict[str, Any]]]:
    out = io.StringIO()
    run = Replay(ReplayOptions(format="json", **options), out)
    for bundle in bundles:
        if not run.feed(bundle):
            break
    run.finish("test")
    return run, [json.loads(line) for line in out.getvalue().splitlines()]


def decisions(printed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in printed if "summary" in p and "controller" in p]


# --- parsing ---------------------------------------------------------------------------------------------
def test_paths_targets_and_values() -> None:
    assert parse_path("spec.updateStrategy.rollingUpdate.maxUnavailable") == [
        "spec", "updateStrategy", "rollingUpdate", "maxUnavailable"]
    assert parse_path("metadata.labels[kubernetes.io/os]") == ["metadata", "labels", "kubernetes.io/os"]
    assert parse_path("spec.template.spec.containers.0.image") == ["spec", "template", "spec", "containers", "0",
                                                                   "image"]
    assert parse_target("Node/node-1") == NamedObject(("Node",), "", "node-1")
    assert parse_target("DaemonSet/ns/x") == NamedObject(("DaemonSet",), "ns", "x")
    change = parse_set("spec.updateStrategy.rollingUpdate.maxUnavailable=3", AGENT)
    assert (change.target, change.value) == (NamedObject(("DaemonSet",), NAMESPACE, "agent"), 3)  # the kind that has it
    assert parse_set("spec.updateStrategy.rollingUpdate.maxUnavailable='25%'", AGENT).value == "25%"
    node = parse_set("Node/node-2:spec.taints=[{key: x, effect: NoSchedule}]", None)
    assert node.target == NamedObject(("Node",), "", "node-2") and node.value == [{"key": "x", "effect": "NoSchedule"}]
    assert parse_add_node("node-9:zone=b,disk=ssd") == ("node-9", {"zone": "b", "disk": "ssd"})
    with pytest.raises(WhatIfError, match="which object"):
        parse_set("spec.replicas=3", None)
    with pytest.raises(WhatIfError, match="expected NAMESPACE/NAME"):
        parse_target("just-a-name")


# --- what if -------------------------------------------------------------------------------------------------
def test_what_if_max_unavailable_were_2(bundles: list[Bundle]) -> None:
    what_if = WhatIf(sets=[parse_set("spec.updateStrategy.rollingUpdate.maxUnavailable=2", AGENT)])
    run, printed = replay(bundles, controller=AGENT, what_if=what_if)
    steps = [d["summary"]["rollout"] for d in decisions(printed) if isinstance(d["summary"].get("rollout"), dict)]
    assert steps and all(step["max_unavailable"] == 2 for step in steps)
    assert max(len(step["deleting"]) for step in steps) == 2  # two old pods at once where one went
    assert run.engine.what_if is not None and run.engine.what_if.changed > 0
    # against the record: the first decision that differs, and the replay stops there
    what_if = WhatIf(sets=[parse_set("spec.updateStrategy.rollingUpdate.maxUnavailable=2", AGENT)])
    run, printed = replay(bundles, controller=AGENT, what_if=what_if, diff=True)
    summary = printed[-1]["summary"]
    assert summary["divergence"]["controller"] == f"DaemonSet/{NAMESPACE}/agent"
    assert summary["divergence"]["what"].startswith("summary.rollout.max_unavailable: recorded 1, replayed 2")


def test_what_if_a_node_never_existed_or_one_more_did(bundles: list[Bundle]) -> None:
    _, printed = replay(bundles, controller=AGENT, what_if=WhatIf(drops=[parse_target("Node/node-3")]))
    created = {n for d in decisions(printed) for n in d["summary"].get("creates") or ()}
    assert created and "node-3" not in created
    _, printed = replay(bundles, controller=AGENT, what_if=WhatIf(add_nodes=[("node-9", {"zone": "b"})]))
    first_creates = next(d["summary"]["creates"] for d in decisions(printed) if d["summary"].get("creates"))
    assert first_creates == ["node-0", "node-1", "node-2", "node-3", "node-9"]


def test_what_if_the_spec_were_another(bundles: list[Bundle], tmp_path: Path) -> None:
    from replay.whatif import load_spec

    spec_file = tmp_path / "web.yaml"
    spec_file.write_text("kind: ReplicaSet\nmetadata: {name: web}\nspec:\n  replicas: 1\n"
                         "  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n"
                         "    spec: {containers: [{name: main, image: 'nginx:1'}]}\n")
    target, spec = load_spec(str(spec_file), WEB)
    assert target == NamedObject(("ReplicaSet",), NAMESPACE, "web")
    _, printed = replay(bundles, controller=WEB, what_if=WhatIf(specs={target: spec}))
    assert decisions(printed)[0]["summary"]["reason"] == "too few replicas: creating 1"


# --- explain -------------------------------------------------------------------------------------------------
def test_explain_a_daemonset_per_node(bundles: list[Bundle]) -> None:
    what_if = WhatIf(sets=[
        parse_set("Node/node-1:spec.taints=[{key: dedicated, value: infra, effect: NoSchedule}]", None),
        parse_set("Node/node-2:spec.taints=[{key: gone, effect: NoExecute}]", None)])
    _, printed = replay(bundles, controller=AGENT, explain=True, what_if=what_if)
    first = decisions(printed)[0]["explain"]
    nodes = {n["node"]: n for n in first["nodes"]}
    assert (nodes["node-0"]["should_run"], nodes["node-0"]["should_continue_running"]) == (True, True)
    assert nodes["node-0"]["why"] == "fits: no selector, affinity or taint in the way"
    assert (nodes["node-1"]["should_run"], nodes["node-1"]["should_continue_running"]) == (False, True)
    assert nodes["node-1"]["why"] == "untolerated taint dedicated=infra:NoSchedule: no new pod, but a running one stays"
    assert (nodes["node-2"]["should_run"], nodes["node-2"]["should_continue_running"]) == (False, False)
    assert nodes["node-2"]["why"] == "untolerated taint gone:NoExecute: no new pod, and a running one goes"
    synced = next(d["explain"] for d in decisions(printed) if d["summary"].get("creates"))
    assert sorted(n["node"] for n in synced["nodes"] if n["action"].startswith("create")) == ["node-0", "node-3"]
    failed = [n for d in decisions(printed) for n in d["explain"]["nodes"] if "(failed)" in n["action"]]
    assert failed and all(any(p["phase"] == "Failed" for p in n["pods"]) for n in failed)


def test_explain_a_scale_down_with_its_ranking(bundles: list[Bundle]) -> None:
    _, printed = replay(bundles, controller=WEB, explain=True)
    scale_down = next(d for d in decisions(printed) if d["summary"].get("deletes"))
    explained = scale_down["explain"]
    assert (explained["replicas"], explained["active"], explained["diff"]) == (2, 5, 3)
    ranking = explained["ranking"]
    assert [r["position"] for r in ranking] == [1, 2, 3, 4, 5]
    assert [r["pod"] for r in ranking if r["deleted"]] == scale_down["summary"]["deletes"]
    assert [r["deleted"] for r in ranking] == [True, True, True, False, False]  # the first ranked go


def test_text_explain(bundles: list[Bundle]) -> None:
    out = io.StringIO()
    run = Replay(ReplayOptions(controller=WEB, explain=True), out)
    for bundle in bundles:
        run.feed(bundle)
    run.finish("test")
    text = out.getvalue()
    assert "replicas 2, active 5: diff +3; expectations satisfied: manageReplicas ran" in text
    assert "ranking (upstream's ActivePodsWithRanks, first = deleted first):" in text
    assert text.count("DELETE") == 3


# --- the window ------------------------------------------------------------------------------------------------
def test_the_window_narrows_what_is_reported_not_what_is_replayed(bundles: list[Bundle]) -> None:
    _, everything = replay(bundles, controller=WEB)
    position, reached = 0, {}
    for bundle in bundles:
        if bundle.tick.kind == "batch" and bundle.tick.last_seq:
            position = max(position, bundle.tick.last_seq)
        reached[bundle.tick.id] = position
    middle = sorted(set(reached.values()))[len(set(reached.values())) // 2]
    run, later = replay(bundles, controller=WEB, window=Window(since_seq=middle))
    assert decisions(later) == [d for d in decisions(everything) if reached[d["tick"]] >= middle]
    assert decisions(later) and len(decisions(later)) < len(decisions(everything))
    assert run.engine.stats.ticks == len(bundles)  # every tick replayed, the early ones silently
    until = bundles[10].tick.at
    run, early = replay(bundles, controller=WEB, window=Window(until=until))
    assert decisions(early) == [d for d in decisions(everything) if d["tick"] <= bundles[10].tick.id]
    assert run.engine.stats.ticks == 11  # it stopped at the first tick past the window


# --- a --set path checked against the kind's model ---------------------------------------------------------
@pytest.mark.parametrize(("text", "target"), [
    pytest.param("spec.replicas=10", "ReplicaSet/demo/web", id="replicas-narrows-to-replicaset"),
    pytest.param("spec.updateStrategy.rollingUpdate.maxUnavailable=3", "DaemonSet/demo/web",
                 id="max-unavailable-narrows-to-daemonset"),
    pytest.param("spec.updateStrategy.rollingUpdate.maxSurge='25%'", "DaemonSet/demo/web", id="max-surge"),
    pytest.param("spec.updateStrategy.rollingUpdate=null", "DaemonSet/demo/web", id="removing-an-object"),
    pytest.param("spec.updateStrategy={type: RollingUpdate, rollingUpdate: {maxUnavailable: 2}}",
                 "DaemonSet/demo/web", id="an-object-value"),
    pytest.param("spec.minReadySeconds=5", "DaemonSet/ReplicaSet/demo/web", id="both-kinds"),
    pytest.param("spec.template.spec.containers.0.image=nginx:2", "DaemonSet/ReplicaSet/demo/web",
                 id="container-image"),
    pytest.param("spec.template.spec.containers.1={name: side, image: x}", "DaemonSet/ReplicaSet/demo/web",
                 id="container-appended"),
    pytest.param("spec.template.spec.containers.0.env=[{name: A, value: b}]", "DaemonSet/ReplicaSet/demo/web",
                 id="container-env-kept-in-templates"),
    pytest.param("spec.template.spec.containers.0.resources.limits.cpu=1", "DaemonSet/ReplicaSet/demo/web",
                 id="below-a-kept-field"),
    pytest.param("spec.template.spec.tolerations.0.key=dedicated", "DaemonSet/ReplicaSet/demo/web",
                 id="toleration"),
    pytest.param("spec.template.metadata.labels[app.kubernetes.io/name]=x", "DaemonSet/ReplicaSet/demo/web",
                 id="template-label"),
    pytest.param("ReplicaSet/demo/web:spec.replicas=3", "ReplicaSet/demo/web", id="named-replicaset"),
    pytest.param("DaemonSet/demo/agent:spec.updateStrategy.type=OnDelete", "DaemonSet/demo/agent",
                 id="named-daemonset"),
    pytest.param("Node/node-2:spec.taints=[{key: dedicated, effect: NoSchedule}]", "Node/node-2", id="node-taints"),
    pytest.param("Node/node-1:metadata.labels[zone]=b", "Node/node-1", id="node-label"),
])
def test_a_set_path_the_model_has(text: str, target: str) -> None:
    assert str(parse_set(text, WEB).target) == target


@pytest.mark.parametrize(("text", "error"), [
    pytest.param("spec.replicaz=10", "a DaemonSet or a ReplicaSet has no field spec.replicaz that kubus reads "
                                     "(nearest: spec.replicas)", id="replicas-mistyped"),
    pytest.param("foo.bar=1", "a DaemonSet or a ReplicaSet has no field foo that kubus reads (known there: "
                              "apiVersion, kind, metadata, spec, status)", id="no-such-top-level-field"),
    pytest.param("spec.updateStrategy.rollingUpdate.maxUnavailabel=3",
                 "a DaemonSet has no field spec.updateStrategy.rollingUpdate.maxUnavailabel that kubus reads "
                 "(nearest: spec.updateStrategy.rollingUpdate.maxUnavailable)", id="max-unavailable-mistyped"),
    pytest.param("spec.updateStrategy={rollingUpdate: {maxUnavailabel: 2}}",
                 "a DaemonSet has no field spec.updateStrategy.rollingUpdate.maxUnavailabel that kubus reads "
                 "(nearest: spec.updateStrategy.rollingUpdate.maxUnavailable)", id="mistyped-in-an-object-value"),
    pytest.param("metadata.labelz.app=x", "a DaemonSet or a ReplicaSet has no field metadata.labelz that kubus "
                                          "reads (nearest: metadata.labels)", id="metadata-mistyped"),
    pytest.param("spec.template.spec.containers.0.imagee=x",
                 "a DaemonSet or a ReplicaSet has no field spec.template.spec.containers.0.imagee that kubus reads "
                 "(nearest: spec.template.spec.containers.0.image)", id="container-field-mistyped"),
    pytest.param("spec.template.spec.containers.image=x",
                 "spec.template.spec.containers of a DaemonSet or a ReplicaSet is a list: its items are numbered "
                 "(0, 1, ...)", id="list-without-index"),
    pytest.param("spec.replicas.x=1", "spec.replicas of a ReplicaSet is a plain value, without fields",
                 id="below-a-plain-value"),
    pytest.param("ReplicaSet/demo/web:spec.updateStrategy.type=OnDelete",
                 "a ReplicaSet has no field spec.updateStrategy that kubus reads (known there: minReadySeconds, "
                 "replicas, selector, template)", id="daemonset-field-on-a-replicaset"),
    pytest.param("DaemonSet/demo/agent:spec.replicas=3",
                 "a DaemonSet has no field spec.replicas that kubus reads (known there: minReadySeconds, "
                 "revisionHistoryLimit, selector, template, templateGeneration, updateStrategy)",
                 id="replicaset-field-on-a-daemonset"),
    pytest.param("Node/node-2:spec.taints=[{key: x, efect: NoSchedule}]",
                 "a Node has no field spec.taints.0.efect that kubus reads (nearest: spec.taints.0.effect)",
                 id="node-taint-mistyped-in-the-value"),
    pytest.param("Deploymnet/demo/web:spec.replicas=3", "kubus reads no kind 'Deploymnet' (nearest: DaemonSet)",
                 id="unknown-kind"),
])
def test_a_set_path_the_model_has_not_is_refused_naming_the_nearest(text: str, error: str) -> None:
    with pytest.raises(WhatIfError) as raised:
        parse_set(text, WEB)
    assert str(raised.value) == f"--set {text!r}: {error}"


def test_the_what_if_header_names_the_kind_the_replay_found(bundles: list[Bundle]) -> None:
    """A name that may be a DaemonSet or a ReplicaSet is named as the one the history holds, by the path
    (spec.replicas: a ReplicaSet) or by the events changed (a container image: either); an object of which
    no event was replayed is said to be unchanged."""
    what_if = WhatIf(sets=[parse_set("spec.replicas=3", WEB),
                           parse_set("spec.template.spec.containers.0.image=busybox:9", AGENT),
                           parse_set("spec.replicas=7", NamedObject(("DaemonSet", "ReplicaSet"), NAMESPACE, "nope"))])
    out = io.StringIO()
    run = Replay(ReplayOptions(what_if=what_if), out)
    for bundle in bundles:
        run.feed(bundle)
    run.finish("test")
    header = next(line for line in out.getvalue().splitlines() if line.startswith("what if: "))
    assert header == (f"what if: ReplicaSet/{NAMESPACE}/web: spec.replicas = 3; "
                      f"DaemonSet/{NAMESPACE}/agent: spec.template.spec.containers.0.image = \"busybox:9\"; "
                      f"ReplicaSet/{NAMESPACE}/nope (no event of it replayed: nothing changed): spec.replicas = 7")


@pytest.mark.parametrize(("sets", "code", "said"), [
    pytest.param(["spec.replicaz=10"], 2, "kubus replay: --set 'spec.replicaz=10': a DaemonSet or a ReplicaSet has "
                                          "no field spec.replicaz that kubus reads (nearest: spec.replicas)\n",
                 id="mistyped"),
    pytest.param(["spec.replicas=1"], 0, f"what if: ReplicaSet/{NAMESPACE}/web: spec.replicas = 1\n", id="good"),
])
def test_the_command_line_exits_2_on_an_unknown_set_path(history_file: Path, sets: list[str], code: int,
                                                         said: str) -> None:
    args = [arg for text in sets for arg in ("--set", text)]
    result = subprocess.run([sys.executable, "-m", "kubus", "replay", "--from-file", str(history_file),
                             "--controller", f"{NAMESPACE}/web", *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == code, result.stderr
    assert said in (result.stderr if code else result.stdout), (result.stdout[-2000:], result.stderr)
