"""The rendered manifests against `kubus sim` (issue 16, 2): every document of a kind the sim serves goes through
`kubectl apply --dry-run=server`, and every workload's pod template is validated as a Pod. The kinds the sim
does not serve are named below, so that a kind it starts serving is validated from then on, and a kind deploy/
gains is one this test must be told about."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.deploy.manifests import DEPLOY, NAMESPACE, pod_specs, render
from tests.simulation import Kubectl, SimProcess

pytestmark = pytest.mark.kubectl

# what deploy/ renders that the sim (sim/resources.py) has no API for: checked by test_kustomize.py and
# test_rbac.py instead. Another helper is teaching the sim ServiceAccounts and RBAC: they move to SERVED then.
NOT_SERVED = {("", "ConfigMap"), ("", "Secret"), ("", "Service"), ("", "ServiceAccount"), ("apps", "Deployment"),
              ("apps", "StatefulSet"), ("batch", "Job"), ("policy", "PodDisruptionBudget"),
              ("networking.k8s.io", "NetworkPolicy"), ("rbac.authorization.k8s.io", "ClusterRole"),
              ("rbac.authorization.k8s.io", "ClusterRoleBinding")}


def _group(doc: dict[str, Any]) -> str:
    api_version: str = doc["apiVersion"]
    return api_version.rpartition("/")[0]


def _served(kubectl: Kubectl) -> dict[tuple[str, str], bool]:
    """(group, kind) -> namespaced, of every kind the sim's discovery lists."""
    served = {}
    for line in kubectl("api-resources", "--no-headers").stdout.splitlines():
        cols = line.split()  # NAME [SHORTNAMES] APIVERSION NAMESPACED KIND
        served[(cols[-3].rpartition("/")[0], cols[-1])] = cols[-2] == "true"
    return served


def _dry_run(kubectl: Kubectl, docs: list[dict[str, Any]]) -> None:
    if not docs:
        return
    out = kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(docs)).stdout
    for d in docs:
        assert f"{d['metadata']['name']} created (server dry run)" in out, out


def _ensure_namespace(sim: SimProcess) -> None:
    code, body = sim.request("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    assert code in (201, 409), body


def test_what_the_sim_serves_validates_server_side(sim: SimProcess, kubectl: Kubectl) -> None:
    docs = render(DEPLOY)
    served = _served(kubectl)
    kinds = {(_group(d), d["kind"]) for d in docs}
    unknown = kinds - set(served) - NOT_SERVED
    assert not unknown, f"deploy/ renders kinds this test does not know: {unknown}"
    checked = [d for d in docs if (_group(d), d["kind"]) in served]
    assert {d["kind"] for d in checked} >= {"Namespace"}
    # the cluster-scoped objects first, the namespace absent: a dry run creates nothing
    before, _ = sim.request("GET", f"/api/v1/namespaces/{NAMESPACE}")
    _dry_run(kubectl, [d for d in checked if not served[(_group(d), d["kind"])]])
    after, _ = sim.request("GET", f"/api/v1/namespaces/{NAMESPACE}")
    assert (before, after) != (404, 200), "a dry run created the namespace"
    # then the namespaced ones, into the namespace as `kubectl apply -k deploy` would have made it
    _ensure_namespace(sim)
    _dry_run(kubectl, [d for d in checked if served[(_group(d), d["kind"])]])


def test_every_pod_template_is_a_valid_pod(sim: SimProcess, kubectl: Kubectl) -> None:
    """Every workload's template as the pods its controller would create, through the sim's Pod validation and
    kube-apiserver's strict decoding (a misspelt field such as `readOnlyRootFilesytem` fails here)."""
    _ensure_namespace(sim)
    pods = []
    for where, spec in pod_specs(render(DEPLOY)):
        name = where.lower().replace("/", "-")
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
                     "spec": spec})
    assert len(pods) == 4
    _dry_run(kubectl, pods)
