"""`kubus controlplane build` finds the build fast once made, and fails in one line when Go or a module is missing;
`kubus controlplane up` writes the kubeconfig once its nodes are Ready, and SIGTERM leaves no process behind."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

from controlplane import building
from controlplane.api import ApiError
from controlplane.building import Build, BuildError
from controlplane.processes import (
    AUDIT_POLICY,
    MARKER,
    ControlPlane,
    ControlPlaneConfig,
    ControlPlaneError,
    audit_policy,
)
from tests.controlplane.conftest import audited
from tests.simulation import Kubectl, wait_for

ROOT = Path(__file__).resolve().parents[2]


def processes_naming(needle: str, but: int | None = None) -> dict[int, str]:
    """Every process (but ``but``) whose command line mentions ``needle`` (the data directory each of ours is given)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in (os.getpid(), but):
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(needle.encode() in arg for arg in argv[1:]):
            found[int(entry.name)] = argv[0].decode(errors="replace").rsplit("/", 1)[-1]
    return found


@pytest.mark.slow
def test_up_writes_the_kubeconfig_and_sigterm_leaves_nothing_running(controlplane_build: Build,
                                                                    tmp_path: Path) -> None:
    kubeconfig, data = tmp_path / "admin.kubeconfig", tmp_path / "cp"
    log = open(tmp_path / "up.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "kubus", "controlplane", "up", "--nodes", "1",
                             "--kubeconfig", str(kubeconfig), "--data-dir", str(data)],
                            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        def written() -> bool:
            assert proc.poll() is None, (tmp_path / "up.log").read_text()
            return kubeconfig.exists()

        wait_for(written, timeout=180, interval=0.2, what="the control plane's kubeconfig")
        nodes = Kubectl(kubeconfig, str(controlplane_build.binary("kubectl"))).json("get", "nodes")["items"]
        assert [n["metadata"]["name"] for n in nodes] == ["kwok-node-0"]
        children = processes_naming(str(data), but=proc.pid)
        assert sorted(children.values()) == sorted(["etcd", "kube-apiserver", "kube-controller-manager",
                                                    "kube-scheduler", "kwok"]), children
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, (tmp_path / "up.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    left = processes_naming(str(data))
    assert not left, f"left running after SIGTERM: {left}"
    out = (tmp_path / "up.log").read_text()
    assert "v1.36.3" in out and f"kubeconfig: {kubeconfig}" in out, out
    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"):
        assert f"log of {name}: {data / 'logs' / name}.log" in out, out
    assert "Traceback" not in out, out
    audit = (data / "logs" / "audit.log").read_text()
    assert '"verb":"create"' in audit and '"resource":"nodes"' in audit  # writes logged...
    assert '"verb":"list"' not in audit and '"verb":"watch"' not in audit  # ...reads not


def test_a_warm_build_is_found_at_once(controlplane_build: Build) -> None:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kubus", "controlplane", "build"], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert f"bin: {controlplane_build.bin_dir}" in done.stdout, done.stdout
    assert "kubernetes v1.36.3" in done.stdout and "kwok v0.8.0" in done.stdout, done.stdout
    found_in = time.monotonic() - started
    assert found_in < 5, f"a warm build took {found_in:.1f}s (Python's start included)"
    in_process = time.monotonic()
    assert building.build() == controlplane_build
    assert time.monotonic() - in_process < 1.5


def test_without_go_the_build_fails_saying_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBUS_CONTROLPLANE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no go on it
    monkeypatch.setattr(building, "GO_FALLBACK", tmp_path / "no-go")
    with pytest.raises(BuildError, match=r"^the Go toolchain is missing: no `go` on PATH nor at .*no-go"):
        building.build()


def test_a_missing_module_fails_the_build_saying_which(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    go = shutil.which("go") or str(building.GO_FALLBACK)
    if not Path(go).is_file():
        pytest.fail("this test needs the Go toolchain (as `kubus controlplane build` does)")
    sources = tmp_path / "go"
    shutil.copytree(building.GO_DIR, sources)
    gomod = sources / "kubernetes" / "go.mod"
    gomod.write_text(gomod.read_text().replace("k8s.io/kubernetes v1.36.3", "k8s.io/kubernetes v1.36.99"))
    monkeypatch.setattr(building, "GO_DIR", sources)
    monkeypatch.setenv("KUBUS_CONTROLPLANE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GOPROXY", "off")  # nothing downloaded: what the module cache lacks is missing
    with pytest.raises(BuildError) as failed:
        building.build()
    message = str(failed.value)
    assert "\n" not in message, message
    assert message.startswith("downloading the modules of kubernetes failed: go: "), message
    assert "k8s.io/kubernetes@v1.36.99" in message, message
    assert not list((tmp_path / "cache").glob(".building-*")), "a failed build left its temporary directory"


def test_a_data_dir_of_someone_elses_is_refused(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    plane = ControlPlane(Build(tmp_path / "no-build", {}), ControlPlaneConfig(nodes=1, data_dir=tmp_path))
    with pytest.raises(ControlPlaneError, match=f"data directory {tmp_path} is not empty"):
        plane.start()
    assert (tmp_path / "precious.txt").read_text() == "keep me"
    assert not (tmp_path / MARKER).exists()


def test_bad_config_names_the_field() -> None:
    with pytest.raises(ControlPlaneError, match="nodes must be 0 or more, not -1"):
        ControlPlaneConfig(nodes=-1).validate()
    with pytest.raises(ControlPlaneError, match="audit_reads_of must be user group names, not ' '"):
        ControlPlaneConfig(audit_reads_of=("system:authenticated", " ")).validate()

    with pytest.raises(ControlPlaneError, match=r"controller_manager_qps must be more than 0 .*, not 0$"):
        ControlPlaneConfig(controller_manager_qps=0).validate()
    with pytest.raises(ControlPlaneError, match=r"controller_manager_burst must be a whole number, 1 or more .*not 0$"):
        ControlPlaneConfig(controller_manager_burst=0).validate()
    with pytest.raises(ControlPlaneError, match=r"controller_manager_burst must be .*not 2\.5$"):
        ControlPlaneConfig(controller_manager_burst=2.5).validate()  # type: ignore[arg-type]


def test_kube_controller_managers_limiter_is_its_default_unless_chosen() -> None:
    assert ControlPlaneConfig().controller_manager_flags() == [
        "--controllers=*,-daemonset-controller,-replicaset-controller"]
    assert ControlPlaneConfig(upstream_controllers=True, controller_manager_qps=10000,
                              controller_manager_burst=10000).controller_manager_flags() == [
        "--controllers=*", "--kube-api-qps=10000", "--kube-api-burst=10000"]
    assert ControlPlaneConfig(controller_manager_qps=2.5).controller_manager_flags()[1:] == ["--kube-api-qps=2.5"]


def test_audit_reads_of_adds_a_first_rule_and_leaves_the_default_policy_alone(tmp_path: Path) -> None:
    assert audit_policy() == AUDIT_POLICY
    rules = yaml.safe_load(audit_policy(("g1", "system:serviceaccounts:kubus-system")))["rules"]
    assert rules[0] == {"level": "Metadata", "userGroups": ["g1", "system:serviceaccounts:kubus-system"]}
    assert rules[1:] == yaml.safe_load(AUDIT_POLICY)["rules"]
    # `kubus controlplane up --audit-reads-of` passes it on: a bad one is refused before anything starts
    bad = subprocess.run([sys.executable, "-m", "kubus", "controlplane", "up", "--data-dir", str(tmp_path / "cp"),
                          "--audit-reads-of", ""], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2, bad
    assert bad.stderr.strip() == ("kubus controlplane up: the control plane's audit_reads_of must be user group "
                                  "names, not ''"), bad.stderr
    assert not (tmp_path / "cp").exists()


@pytest.mark.slow
def test_a_failed_start_stops_what_it_started(controlplane_build: Build, tmp_path: Path) -> None:
    """kwok exits at once (here: `false` stands for it): the start fails naming it and its log, and etcd,
    kube-apiserver and the rest, started before it, are stopped."""
    fake = tmp_path / "build"
    (fake / "bin").mkdir(parents=True)
    for name in building.BINARIES:
        (fake / "bin" / name).symlink_to(controlplane_build.binary(name) if name != "kwok" else shutil.which("false"))
    shutil.copy(controlplane_build.stages, fake / "stages.yaml")
    data = tmp_path / "cp"
    plane = ControlPlane(Build(fake, controlplane_build.versions), ControlPlaneConfig(nodes=1, data_dir=data))
    with pytest.raises(ControlPlaneError, match=rf"kwok exited with code 1 during the start; its log is {data}"):
        plane.start()
    assert not processes_naming(str(data)), "left running after a failed start"
    assert not plane.kubeconfig.exists()


@pytest.mark.slow
def test_a_killed_up_leaves_no_orphans(controlplane_build: Build, tmp_path: Path) -> None:
    """SIGKILL gives `kubus controlplane up` no chance to stop anything: the kernel ends its children
    (PR_SET_PDEATHSIG), which run in sessions of their own."""
    kubeconfig, data = tmp_path / "admin.kubeconfig", tmp_path / "cp"
    proc = subprocess.Popen([sys.executable, "-m", "kubus", "controlplane", "up", "--nodes", "1",
                             "--kubeconfig", str(kubeconfig), "--data-dir", str(data)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        wait_for(lambda: kubeconfig.exists() or proc.poll() is not None, timeout=180, interval=0.2,
                 what="the control plane's kubeconfig")
        assert proc.poll() is None, f"kubus controlplane up exited with {proc.returncode}"
        assert len(processes_naming(str(data), but=proc.pid)) == 5
    finally:
        proc.kill()
        proc.wait()
    wait_for(lambda: not processes_naming(str(data)), timeout=30, interval=0.2,
             what="the killed control plane's processes to be gone")


@pytest.mark.slow
def test_upstream_controllers_make_the_pods_themselves(controlplane_build: Build, tmp_path: Path) -> None:
    """With upstream_controllers (`--upstream-controllers`) kube-controller-manager's own ReplicaSet controller
    runs: a ReplicaSet gets its pods with no kubus at all, made by its ServiceAccount."""
    with ControlPlane(controlplane_build, ControlPlaneConfig(nodes=1, data_dir=tmp_path / "cp",
                                                             upstream_controllers=True)) as plane:
        api = plane.api()
        labels = {"app": "web"}
        api.post("/apis/apps/v1/namespaces/default/replicasets", {
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
            "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}}}})

        def ready() -> bool:
            try:
                return api.get("/apis/apps/v1/namespaces/default/replicasets/web")["status"].get("readyReplicas") == 2
            except ApiError:
                return False

        wait_for(ready, timeout=60, interval=0.2, what="the upstream ReplicaSet controller's 2 ready pods")
        makers = {e["user"]["username"] for e in audited(plane, "default", "pods", "create")}
        assert makers == {"system:serviceaccount:kube-system:replicaset-controller"}, makers
    assert not processes_naming(str(tmp_path / "cp"))
