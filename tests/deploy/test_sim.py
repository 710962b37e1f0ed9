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


def _served(kubectl: Kubectl) -> set[tuple[str, str]]:
    lines = kubectl("api-resources", "--no-headers").stdout.splitlines()
    served = set()
    for line in lines:
        cols = line.split()
        served.add((cols[-3].rpartition("/")[0], cols[-1]))  # APIVERSION ... KIND are the last columns
    return served


def test_what_the_sim_serves_validates_server_side(sim: SimProcess, kubectl: Kubectl) -> None:
    docs = render(DEPLOY)
    served = _served(kubectl)
    kinds = {(_group(d), d["kind"]) for d in docs}
    assert kinds - served <= NOT_SERVED, f"deploy/ renders kinds this test does not know: {kinds - served - NOT_SERVED}"
    checked = [d for d in docs if (_group(d), d["kind"]) in served]
    existed, _ = sim.request("GET", f"/api/v1/namespaces/{NAMESPACE}")
    assert {d["kind"] for d in checked} >= {"Namespace"}
    out = kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(checked)).stdout
    for d in checked:
        assert f"{d['metadata']['name']} created (server dry run)" in out, out
    after, _ = sim.request("GET", f"/api/v1/namespaces/{NAMESPACE}")
    assert (existed, after) != (404, 200), "a dry run created the namespace"


def test_every_pod_template_is_a_valid_pod(sim: SimProcess, kubectl: Kubectl) -> None:
    """Every workload's template as the pods its controller would create, through the sim's Pod validation and
    kube-apiserver's strict decoding (a misspelt field such as `readOnlyRootFilesytem` fails here)."""
    code, body = sim.request("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    assert code in (201, 409), body
    pods = []
    for where, spec in pod_specs(render(DEPLOY)):
        name = where.lower().replace("/", "-")
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
                     "spec": spec})
    assert len(pods) == 4
    out = kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(pods)).stdout
    for pod in pods:
        assert f"pod/{pod['metadata']['name']} created (server dry run)" in out, out
