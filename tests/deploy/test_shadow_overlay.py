"""overlays/shadow (docs/shadow.md): kubus beside kube-controller-manager's own controllers, acting on nothing.
It renders; no executor is left; every role it grants reads only (get, list, watch); the reconcilers run with
KUBUS_SHADOW=true; and the rest of deploy/ is there unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.manifests import DEPLOY, ROOT, one, render

pytestmark = pytest.mark.kubectl

OVERLAY = ROOT / "overlays" / "shadow"
READ = {"get", "list", "watch"}


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return render(OVERLAY)


def _key(doc: dict[str, Any]) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


def test_no_executor_and_no_write_access(docs: list[dict[str, Any]]) -> None:
    assert not [d for d in docs if "executor" in d["metadata"]["name"]]
    roles = [d for d in docs if d["kind"] in ("ClusterRole", "Role")]
    assert roles, "ingest's role must be there: it lists and watches"
    for role in roles:
        for rule in role["rules"]:
            assert set(rule["verbs"]) <= READ, f"{role['kind']} {role['metadata']['name']} grants {rule}"
    for binding in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        assert binding["roleRef"]["name"] in {r["metadata"]["name"] for r in roles}, binding


def test_the_reconcilers_run_in_shadow_mode(docs: list[dict[str, Any]]) -> None:
    config = one(docs, "ConfigMap", "kubus-config")["data"]
    assert (config["KUBUS_SHADOW"], config["KUBUS_SHADOW_WINDOW"]) == ("true", "30s")
    reconciler = one(docs, "StatefulSet", "kubus-reconciler")["spec"]["template"]["spec"]
    (main,) = reconciler["containers"]
    assert main["args"][0] == "reconcile"
    assert {"configMapRef": {"name": "kubus-config"}} in main["envFrom"]


def test_everything_else_is_deploys(docs: list[dict[str, Any]]) -> None:
    base = {_key(d): d for d in render(DEPLOY)}
    ours = {_key(d): d for d in docs}
    assert set(ours) == {k for k in base if "executor" not in k[1]}
    for key, doc in ours.items():
        if key != ("ConfigMap", "kubus-config"):
            assert doc == base[key], f"{key} differs from deploy/'s"


def test_the_alert_rules_use_the_shadows_metric() -> None:
    """deploy/monitoring/shadow-rules.yaml: a Prometheus rules file whose divergence alert reads the counter
    the shadow serves, by its labels."""
    import yaml

    from runtime.serving import SHADOW_DIVERGENCES

    rules = yaml.safe_load((DEPLOY / "monitoring" / "shadow-rules.yaml").read_text())
    (group,) = rules["groups"]
    alerts = {r["alert"]: r for r in group["rules"]}
    divergence = alerts["KubusShadowDivergence"]
    name = SHADOW_DIVERGENCES._name + "_total"
    assert name in divergence["expr"] and "by (controller, kind)" in divergence["expr"]
    assert set(SHADOW_DIVERGENCES._labelnames) == {"controller", "kind"}
    for alert in alerts.values():
        assert alert["labels"]["severity"] and alert["annotations"]["summary"]
