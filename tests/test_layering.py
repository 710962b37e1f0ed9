"""The house's layers, checked by walking every module's imports (issue 14).

    kube, messages            the typed model and the bus's messages: leaves
    reconciler.core           the pure controllers: the cache fold, the syncs, one batch -> one commit
    store, runtime            the store port and its adapters; the bus, serving, failpoints, kubeconfig, flags
    ingest, reconciler, executor, replay, sim    the services (and the replay, and the simulated cluster)
    controlplane              builds and runs a real control plane (Go binaries) for the CLI and the tests
    kubus                     the command line: nothing imports it

An import inside `if TYPE_CHECKING:` counts too (a type is a dependency); an import inside a function counts
(hiding an import in a function does not remove the dependency, nor the cycle).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kube", "messages", "runtime", "store", "ingest", "reconciler", "executor", "replay", "sim", "controlplane",
            "kubus")

# what each layer may import of the project (its own package always)
ALLOWED: dict[str, set[str]] = {
    "kube": set(),
    "messages": {"kube"},
    "reconciler.core": {"kube", "messages"},
    "runtime": {"kube", "messages"},
    "store": {"kube", "messages", "reconciler.core"},
    "ingest": {"kube", "messages", "runtime", "store"},
    "reconciler": {"kube", "messages", "runtime", "store", "reconciler.core"},
    "executor": {"kube", "messages", "runtime", "store"},
    "replay": {"kube", "messages", "runtime", "store", "reconciler.core"},
    "sim": {"kube", "messages", "runtime"},
    "controlplane": {"kube", "messages", "runtime"},
    "kubus": set(PACKAGES) | {"reconciler.core"},
}
# what the pure core may not import from outside the project: anything that does I/O or waits
IMPURE = {"asyncio", "nats", "sqlalchemy", "alembic", "aiohttp", "kubernetes", "urllib3", "socket", "subprocess",
          "threading", "http", "urllib", "os", "shutil", "tempfile", "prometheus_client", "random", "uuid", "time"}


def modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            yield name, path


def imports_of(name: str, path: Path) -> set[str]:
    """The absolute names of every module `name` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.add(module)
            # `from pkg import module` names a module too
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


MODULES = dict(modules())
GRAPH = {name: {i for i in imports_of(name, path) if i in MODULES and i != name} for name, path in MODULES.items()}
EXTERNAL = {name: {i.split(".")[0] for i in imports_of(name, path) if i.split(".")[0] not in PACKAGES}
            for name, path in MODULES.items()}


def layer_of(module: str) -> str:
    return "reconciler.core" if module.startswith("reconciler.core") else module.split(".")[0]


def test_every_module_imports_only_the_layers_below_it() -> None:
    wrong = sorted(f"{module} imports {target}" for module, targets in GRAPH.items() for target in targets
                   if layer_of(target) != layer_of(module) and layer_of(target) not in ALLOWED[layer_of(module)])
    assert not wrong, "\n".join(wrong)


def test_the_core_does_no_io() -> None:
    wrong = sorted(f"{module} imports {target}" for module, targets in EXTERNAL.items()
                   if layer_of(module) == "reconciler.core" for target in targets if target in IMPURE)
    assert not wrong, "\n".join(wrong)


def test_no_module_outside_the_cli_imports_it() -> None:
    wrong = sorted(f"{module} imports {target}" for module, targets in GRAPH.items()
                   if layer_of(module) != "kubus" for target in targets if layer_of(target) == "kubus")
    assert not wrong, "\n".join(wrong)


def test_only_the_cli_imports_the_controlplane() -> None:
    """The real control plane (Go binaries, processes) is for `kubus controlplane` and the tests, never a service's."""
    wrong = sorted(f"{module} imports {target}" for module, targets in GRAPH.items()
                   if layer_of(module) not in {"kubus", "controlplane"} for target in targets
                   if layer_of(target) == "controlplane")
    assert not wrong, "\n".join(wrong)


def test_migrations_import_no_live_code() -> None:
    wrong = []
    for path in sorted((ROOT / "migrations" / "versions").glob("*.py")):
        for imported in imports_of(f"migrations.versions.{path.stem}", path):
            top = imported.split(".")[0]
            if top and top not in {"alembic", "sqlalchemy", "__future__"} and top not in sys.stdlib_module_names:
                wrong.append(f"{path.name} imports {imported}")
    assert not wrong, "\n".join(wrong)


def cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(GRAPH):
        if root in index:
            continue
        work = [(root, iter(sorted(GRAPH[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(GRAPH[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_cycles() -> None:
    # a package's __init__ importing its own modules is how packages re-export: not a cycle between modules
    found = [c for c in cycles() if not all(m == c[0] or m.startswith(c[0] + ".") for m in c)]
    assert not found, "\n".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize("rule", ["a layer imports one above it", "a cycle"])
def test_the_checks_can_fail(rule: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk sees what it must refuse (so an empty graph or a wrong root cannot pass it)."""
    assert {"kube", "messages", "reconciler.core", "store", "kubus"} <= {layer_of(m) for m in MODULES}
    if rule == "a layer imports one above it":
        monkeypatch.setitem(GRAPH, "kube.core", GRAPH["kube.core"] | {"store"} if "store" in MODULES else {"kubus"})
        with pytest.raises(AssertionError):
            test_every_module_imports_only_the_layers_below_it()
    else:
        monkeypatch.setitem(GRAPH, "kube.core", GRAPH["kube.core"] | {"messages"})
        monkeypatch.setitem(GRAPH, "messages", GRAPH["messages"] | {"kube.core"})
        with pytest.raises(AssertionError):
            test_no_import_cycles()
