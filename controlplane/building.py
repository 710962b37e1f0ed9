"""Build the real control plane's binaries from the Go modules pinned in controlplane/go/, or find them built.

Each piece has a go.mod of its own (a shared one could lift a module past what another piece compiles with),
whose `tool` directives name the main packages to build:

    controlplane/go/kubernetes   k8s.io/kubernetes: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl
    controlplane/go/etcd         go.etcd.io/etcd/server/v3 (its module root is etcd's main package)
    controlplane/go/kwok         sigs.k8s.io/kwok/cmd/kwok (the nodes and their kubelets)

The binaries go to ``$KUBUS_CONTROLPLANE_CACHE/<key>/bin/`` (default ``~/.cache/kubus/controlplane``), where the
key is a digest of the versions, every go.mod and go.sum, and the build flags: a change to any of them builds
afresh, and a warm lookup is a stat. A build is made in a temporary directory beside it and renamed into place
when complete, so a half-finished build is never taken for a finished one. Beside ``bin/`` are kwok's stage
files (``stages.yaml``, from the module cache: standalone kwok has none built in) and ``versions.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

GO_DIR = Path(__file__).resolve().parent / "go"
GO_FALLBACK = Path("/usr/local/go/bin/go")
GO_MINIMUM = (1, 26)
PROGRESS_EVERY_S = 15.0

KUBERNETES_MODULE = "k8s.io/kubernetes"
ETCD_MODULE = "go.etcd.io/etcd/server/v3"
KWOK_MODULE = "sigs.k8s.io/kwok"

# kwok's stages, from its module (kustomize/stage/...): nodes become Ready and keep a lease; pods become Running
# and Ready, complete, and are deleted as soon as their deletion is asked for (the "fast" pod-delete stage has no
# delay: it does not wait out the grace period, as the "general" one would; docs/sim-vs-real.md)
KWOK_STAGES = ("node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
               "pod/fast/pod-ready.yaml", "pod/fast/pod-complete.yaml", "pod/fast/pod-delete.yaml")

BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "etcd", "kwok")


class BuildError(RuntimeError):
    """The build cannot be made: the message is one line saying what is missing or what failed."""


@dataclass(frozen=True)
class Piece:
    name: str  # its directory under controlplane/go/
    module: str  # the module whose version it reports
    output: str  # a directory (several binaries, named by go) or a file path (one binary), relative to bin/

    def directory(self) -> Path:
        return GO_DIR / self.name


PIECES = (Piece("kubernetes", KUBERNETES_MODULE, "."), Piece("etcd", ETCD_MODULE, "etcd"),
          Piece("kwok", KWOK_MODULE, "."))


@dataclass(frozen=True)
class Build:
    root: Path
    versions: dict[str, str]  # kubernetes, etcd, kwok -> their module versions

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def stages(self) -> Path:
        return self.root / "stages.yaml"

    def binary(self, name: str) -> Path:
        return self.bin_dir / name

    def describe(self) -> str:
        return ", ".join(f"{name} {version}" for name, version in self.versions.items())


def _require(text: str, module: str) -> str | None:
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.MULTILINE)
    return found.group(1) if found else None


def _tools(text: str) -> list[str]:
    block = re.search(r"^tool\s*\((.*?)^\)", text, re.MULTILINE | re.DOTALL)
    if block:
        lines = (line.strip() for line in block.group(1).splitlines())
        return [line for line in lines if line and not line.startswith("//")]
    return re.findall(r"^tool\s+(\S+)", text, re.MULTILINE)


def versions(go_dir: Path | None = None) -> dict[str, str]:
    """The version each piece's go.mod requires of its module."""
    found: dict[str, str] = {}
    for piece in PIECES:
        gomod = (go_dir or GO_DIR) / piece.name / "go.mod"
        try:
            text = gomod.read_text()
        except OSError as exc:
            raise BuildError(f"the control plane's {gomod} is missing ({exc.strerror})") from None
        version = _require(text, piece.module)
        if version is None:
            raise BuildError(f"{gomod} requires no version of {piece.module}")
        found[piece.name] = version
    return found


def ldflags(found: dict[str, str]) -> dict[str, str]:
    """Each piece's -ldflags: kubernetes' version variables in both packages that hold them, as its own build
    (hack/lib/version.sh) sets them: without them /version says v0.0.0-master+$Format:%H$ (component-base), and
    kubectl's client version and every component's User-Agent say v0.0.0 (client-go)."""
    k8s = found["kubernetes"]
    major, minor = k8s.lstrip("v").split(".")[:2]
    variables = {"gitVersion": k8s, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"}
    stamped = " ".join(f"-X {package}.{k}={v}" for package in ("k8s.io/component-base/version",
                                                               "k8s.io/client-go/pkg/version")
                       for k, v in variables.items())
    return {"kubernetes": f"-s -w {stamped}",
            "etcd": "-s -w", "kwok": f"-s -w -X sigs.k8s.io/kwok/pkg/consts.Version={found['kwok'].lstrip('v')}"}


def cache_root() -> Path:
    configured = os.environ.get("KUBUS_CONTROLPLANE_CACHE")
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kubus" / "controlplane"


def cache_key(go_dir: Path | None = None) -> str:
    """A digest of what the binaries are made from: the versions, every go.mod and go.sum, the build flags."""
    found = versions(go_dir)
    digest = hashlib.sha256()
    digest.update(json.dumps({"versions": found, "ldflags": ldflags(found), "stages": KWOK_STAGES,
                              "env": "CGO_ENABLED=0 -trimpath"}, sort_keys=True).encode())
    for piece in PIECES:
        for name in ("go.mod", "go.sum"):
            path = (go_dir or GO_DIR) / piece.name / name
            try:
                digest.update(f"{piece.name}/{name}\n".encode() + path.read_bytes())
            except OSError as exc:
                raise BuildError(f"the control plane's {path} is missing ({exc.strerror})") from None
    return f"k8s-{found['kubernetes']}-etcd-{found['etcd']}-kwok-{found['kwok']}-{digest.hexdigest()[:16]}"


def find() -> Build | None:
    """The finished build for the pinned sources, or None."""
    root = cache_root() / cache_key()
    if not all((root / "bin" / name).is_file() for name in BINARIES) or not (root / "stages.yaml").is_file():
        return None
    return Build(root, versions())


def find_or_fail() -> Build:
    found = find()
    if found is None:
        raise BuildError(f"the real control plane is not built (no finished build under {cache_root()}): "
                         "run `kubus controlplane build` first (the first build compiles for tens of minutes)")
    return found


def go_binary() -> str:
    on_path = shutil.which("go")
    if on_path:
        return on_path
    if GO_FALLBACK.is_file() and os.access(GO_FALLBACK, os.X_OK):
        return str(GO_FALLBACK)
    raise BuildError(f"the Go toolchain is missing: no `go` on PATH nor at {GO_FALLBACK} "
                     f"(go{GO_MINIMUM[0]}.{GO_MINIMUM[1]} or newer builds the control plane)")


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    # never fetch another toolchain (the go.mod's `go` line would make an older go try), never cgo
    env.update(CGO_ENABLED="0", GOTOOLCHAIN="local", GOFLAGS=(env.get("GOFLAGS", "") + " -mod=readonly").strip())
    return env


def _check_go(go: str) -> str:
    done = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, env=_go_env(), check=False)
    version = done.stdout.strip()
    numbers = re.match(r"go(\d+)\.(\d+)", version)
    if done.returncode != 0 or numbers is None:
        raise BuildError(f"the Go toolchain at {go} does not answer `go env GOVERSION`: {_last_line(done.stderr)}")
    if (int(numbers.group(1)), int(numbers.group(2))) < GO_MINIMUM:
        raise BuildError(f"the Go toolchain at {go} is {version}; the control plane needs "
                         f"go{GO_MINIMUM[0]}.{GO_MINIMUM[1]} or newer")
    return version


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    # go's own errors ("go: ...") say what is missing; a compile error is the first file:line
    for line in lines:
        if line.startswith("go: ") or re.match(r"^\S+\.go:\d+", line):
            return line
    return lines[-1] if lines else "(no output)"


def _run(cmd: list[str], cwd: Path, what: str, progress: Callable[[str], None] | None,
         total: int | None = None) -> None:
    """Run a go command; with -v each package compiled is a line on stderr, counted into progress lines."""
    started = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as errors:
        process = subprocess.Popen(cmd, cwd=cwd, env=_go_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   text=True)
        assert process.stderr is not None
        compiled = 0
        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(PROGRESS_EVERY_S):
                if progress is not None:
                    of = f" of at most {total}" if total else ""
                    progress(f"{what}: {compiled} packages compiled{of} ({time.monotonic() - started:.0f}s)")

        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        try:
            for line in process.stderr:
                errors.write(line)
                if re.match(r"^[\w.\-]+(/\S*)?$", line.strip()):
                    compiled += 1
            code = process.wait()
        finally:
            stop.set()
            ticker.join()
            if process.poll() is None:
                process.kill()
                process.wait()
        if code != 0:
            errors.seek(0)
            raise BuildError(f"{what} failed: {_last_line(errors.read())}")


def _module_dir(go: str, piece_dir: Path, module: str, version: str) -> Path:
    done = subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"], cwd=piece_dir,
                          capture_output=True, text=True, env=_go_env(), check=False)
    try:
        info = json.loads(done.stdout)
    except ValueError:
        info = {}
    if done.returncode != 0 or not info.get("Dir"):
        reason = info.get("Error") or _last_line(done.stderr)
        raise BuildError(f"the Go module {module}@{version} is missing and cannot be downloaded: {reason}")
    return Path(info["Dir"])


def build(progress: Callable[[str], None] | None = None) -> Build:
    """Find the build for the pinned sources, or make it (tens of minutes cold; progress lines meanwhile)."""
    found = find()
    if found is not None:
        return found
    say = progress or (lambda line: None)
    go = go_binary()
    go_version = _check_go(go)
    pinned = versions()
    flags = ldflags(pinned)
    root = cache_root()
    key = cache_key()
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".building-{key}-", dir=root))
    try:
        (work / "bin").mkdir()
        for piece in PIECES:
            directory = piece.directory()
            tools = _tools((directory / "go.mod").read_text())
            if not tools:
                raise BuildError(f"{directory / 'go.mod'} names no `tool` to build")
            say(f"{piece.name} {pinned[piece.name]}: downloading modules")
            _run([go, "mod", "download"], directory, f"downloading the modules of {piece.name}", None)
            listed = subprocess.run([go, "list", "-deps", *tools], cwd=directory, capture_output=True, text=True,
                                    env=_go_env(), check=False)
            if listed.returncode != 0:
                raise BuildError(f"the packages of {piece.name} cannot be listed: {_last_line(listed.stderr)}")
            total = len(listed.stdout.split())
            say(f"{piece.name} {pinned[piece.name]}: building {', '.join(t.rsplit('/', 1)[-1] for t in tools)} "
                f"({total} packages, with {go_version})")
            output = work / "bin" / piece.output
            target = str(output) + ("/" if piece.output == "." else "")
            _run([go, "build", "-v", "-trimpath", "-ldflags", flags[piece.name], "-o", target, *tools],
                 directory, f"building {piece.name}", say, total)
        missing = [name for name in BINARIES if not (work / "bin" / name).is_file()]
        if missing:
            raise BuildError(f"the build made no {', '.join(missing)} in {work / 'bin'}")
        kwok = _module_dir(go, GO_DIR / "kwok", KWOK_MODULE, pinned["kwok"])
        stages = []
        for stage in KWOK_STAGES:
            path = kwok / "kustomize" / "stage" / stage
            try:
                stages.append(path.read_text().strip() + "\n")
            except OSError as exc:
                raise BuildError(f"kwok's stage {path} is missing ({exc.strerror})") from None
        (work / "stages.yaml").write_text("---\n".join(stages))
        (work / "versions.json").write_text(json.dumps({**pinned, "go": go_version}, indent=2) + "\n")
        try:
            os.rename(work, root / key)
        except OSError:
            if find() is None:  # not another build finishing first: a real failure
                raise
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    finished = find()
    if finished is None:
        raise BuildError(f"the build under {root / key} is incomplete after renaming it into place")
    return finished
