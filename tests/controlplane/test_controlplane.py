"""The real control plane comes up as a cluster: the pinned versions, its kwok nodes Ready, a pod scheduled and
made Running and Ready by kwok, the garbage collector deleting what an owner's deletion orphans."""

from __future__ import annotations

import json

import pytest

from controlplane.api import Api, ApiError
from controlplane.processes import ControlPlane
from tests.controlplane.conftest import NODES, pods, running_and_ready
from tests.simulation import Kubectl, wait_for

pytestmark = pytest.mark.slow


def test_it_serves_the_pinned_versions(controlplane: ControlPlane, api: Api, kubectl: Kubectl) -> None:
    version = api.get("/version")
    assert version["gitVersion"] == "v1.36.3", version
    assert (version["major"], version["minor"]) == ("1", "36"), version
    assert controlplane.build.versions["kubernetes"] == "v1.36.3"
    client = kubectl("version", "--client", "-o", "json").stdout
    assert '"gitVersion": "v1.36.3"' in client, client


def test_its_nodes_are_ready(controlplane: ControlPlane, api: Api) -> None:
    nodes = api.get("/api/v1/nodes")["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == sorted(f"kwok-node-{i}" for i in range(NODES))
    for node in nodes:
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", node["status"]
        assert node["status"]["allocatable"]["pods"], node["status"]  # filled by kwok's node-initialize stage
        assert node["status"]["nodeInfo"]["kubeletVersion"].startswith("kwok-"), node["status"]["nodeInfo"]


def test_a_pod_is_scheduled_runs_and_is_deleted(api: Api, namespace: str) -> None:
    api.post(f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain", "labels": {"app": "plain"}},
        "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}})
    pod = wait_for(lambda: next((p for p in pods(api, namespace) if running_and_ready(p)), None), timeout=60,
                   interval=0.2, what="the pod to be Running and Ready")
    assert pod["spec"]["nodeName"].startswith("kwok-node-"), pod["spec"]  # bound by kube-scheduler
    assert pod["status"]["podIP"], pod["status"]  # from kwok's pod-ready stage
    # defaulted by the real API server, which the sim had to imitate
    assert pod["spec"]["serviceAccountName"] == "default"
    assert pod["spec"]["terminationGracePeriodSeconds"] == 30
    api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/plain")
    wait_for(lambda: not pods(api, namespace), timeout=60, interval=0.2, what="the pod to be gone")


def test_the_garbage_collector_deletes_a_pod_whose_owner_is_deleted(api: Api, namespace: str) -> None:
    owner = api.post(f"/api/v1/namespaces/{namespace}/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}})
    api.post(f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "owned", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}]},
        "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}})
    wait_for(lambda: any(running_and_ready(p) for p in pods(api, namespace)), timeout=60, interval=0.2,
             what="the owned pod to be Running and Ready")
    api.request("DELETE", f"/api/v1/namespaces/{namespace}/configmaps/owner")
    wait_for(lambda: not pods(api, namespace), timeout=60, interval=0.2,
             what="the garbage collector to delete the orphaned pod")
    with pytest.raises(ApiError) as gone:
        api.get(f"/api/v1/namespaces/{namespace}/configmaps/owner")
    assert gone.value.status == 404


def test_no_component_is_refused_as_invalid(controlplane: ControlPlane, api: Api) -> None:
    """A component of ours that makes invalid requests fills the logs with errors a test then has to tell from its
    own: kube-apiserver advertising 127.0.0.1 had its `kubernetes` Endpoints refused (loopback) every 10 s."""
    api.get("/readyz")  # the control plane up for a while: its start's requests all made
    refused = [(e["user"]["username"], e["verb"], e["requestURI"], e["responseStatus"].get("message", "")[:200])
               for e in map(json.loads, controlplane.audit_log.read_text().splitlines())
               if e.get("responseStatus", {}).get("code") == 422]
    assert not refused, refused
