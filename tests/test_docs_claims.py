"""What README.md and docs/production.md say, held to what the code and deploy/ do (issue 21, 6: the README denied
the authentication `kubus sim --authz rbac` provides, miscounted the events `describe ds` shows, and neither said
that the image deploy/ names is not published)."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import yaml

from executor.correlating import COMBINED_PREFIX, SPAM_BURST, EventCorrelator
from kube.core import Event, EventSource
from kube.meta import ObjectMeta, ObjectReference
from kube.times import format_time
from sim import resources as R
from tests.deploy.manifests import DEPLOY, ROOT, pod_specs, render

README = ROOT / "README.md"
PRODUCTION = ROOT / "docs" / "production.md"


def _paragraph(text: str, start: str) -> str:
    at = text.index(start)
    end = text.find("\n\n", at)
    return " ".join(text[at:end if end >= 0 else None].split())


def _clauses(text: str) -> list[str]:
    """`text` split at its commas and semicolons, but not inside parentheses or `code`."""
    out, depth, code, current = [], 0, False, ""
    for ch in text:
        if ch == "`":
            code = not code
        elif not code and ch == "(":
            depth += 1
        elif not code and ch == ")":
            depth -= 1
        if ch in ",;" and depth == 0 and not code:
            out.append(current.strip())
            current = ""
        else:
            current += ch
    return [*out, current.strip()]


# What `--authz rbac` provides: an absence claim naming one of these must say it holds only without the flag.
_AUTHZ_TERMS = re.compile(r"\b(authentication|authorization|service ?accounts\b|rbac\b|roles?\b|tokenrequest)",
                          re.IGNORECASE)


def test_the_sim_differences_do_not_deny_what_authz_rbac_provides() -> None:
    text = README.read_text()
    differences = _paragraph(text, "Known differences from kube-apiserver:")
    denials = [c for c in _clauses(differences.split(":", 1)[1])
               if re.search(r"\bno\b", c) and _AUTHZ_TERMS.search(c) and "--authz rbac" not in c]
    assert denials == [], f"README's sim differences deny what `kubus sim --authz rbac` provides: {denials}"
    # and the section on --authz rbac names every kind it serves
    section = text[text.index("### Authentication and RBAC: `kubus sim --authz rbac`"):]
    section = section[:section.index("\n## ")]
    served = [r.kind for r in R.AUTH if r not in R.REVIEWS]
    assert "ServiceAccount" in served
    assert [k for k in served if k not in section] == []


def test_the_daemonset_events_describe_shows_on_50_nodes() -> None:
    """A DaemonSet creating 50 pods within seconds, through the correlator as the executor runs it: what the
    Events API then holds (the events written, a combined one patched to its count), against the README."""
    now = [datetime(2026, 1, 1, tzinfo=UTC)]

    def clock() -> datetime:
        return now[0]

    correlator = EventCorrelator(clock)
    ref = ObjectReference(kind="DaemonSet", namespace="default", name="node-agent", uid="u1", api_version="apps/v1")
    stored: dict[str, Event] = {}
    for i in range(50):
        now[0] += timedelta(milliseconds=50)
        event = Event(metadata=ObjectMeta(name=f"node-agent.{i:016x}", namespace="default"), involved_object=ref,
                      reason="SuccessfulCreate", message=f"Created pod: node-agent-{i:05d}", type="Normal",
                      source=EventSource(component="daemonset-controller"), count=1,
                      first_timestamp=format_time(now[0]), last_timestamp=format_time(now[0]))
        result = correlator.correlate(event)
        if result.event is not None:
            written = msgspec.structs.replace(result.event, metadata=msgspec.structs.replace(
                result.event.metadata, resource_version=str(i + 1)))
            stored[written.metadata.name] = written
            correlator.update_state(written)
    plain = [e for e in stored.values() if not e.message.startswith(COMBINED_PREFIX)]
    combined = [e for e in stored.values() if e.message.startswith(COMBINED_PREFIX)]
    assert all(e.count == 1 for e in plain) and len(combined) == 1
    unrecorded = 50 - len(plain) - combined[0].count
    assert len(plain) + combined[0].count == SPAM_BURST  # every write took a token
    readme = " ".join(README.read_text().split())
    said = (f"on 50 nodes `describe` shows {len(plain)} `Created pod` events and one combined event "
            f"`(x{combined[0].count} over …)`, and the other {unrecorded} creates are in no event")
    assert said in readme
    assert f"lets {SPAM_BURST} writes per DaemonSet through" in readme


def _deploy_image() -> str:
    images = {c["image"] for _, spec in pod_specs(render(DEPLOY))
              for c in spec.get("containers", []) + spec.get("initContainers", [])}
    assert len(images) == 1, images
    return images.pop()


def test_the_docs_say_the_image_is_not_published_and_how_to_build_one(tmp_path: Path) -> None:
    image = _deploy_image()
    name = image.rsplit(":", 1)[0]
    for doc in (README, PRODUCTION):
        text = " ".join(doc.read_text().replace("**", "").split())
        assert re.search(r"\b[Nn]o (kubus )?image is published", text), f"{doc.name} does not say it"
        assert image in text, f"{doc.name} does not name the image deploy/ renders, {image}"
        assert "docker build -t " in text and "docker push " in text, doc
        assert f"kustomize edit set image {name}=" in text, doc
    # the README's overlay, written out beside a path to deploy/, renders with the image it names
    readme = README.read_text()
    block = re.search(r"```yaml\n(# my-kubus/kustomization.yaml\n.*?)```", readme, re.DOTALL)
    assert block is not None, "README has no my-kubus/kustomization.yaml"
    overlay = yaml.safe_load(block.group(1))
    assert overlay["resources"] == ["../deploy"]
    entry = next(i for i in overlay["images"] if i["name"] == name)
    overlay_dir = tmp_path / "my-kubus"
    overlay_dir.mkdir()
    overlay["resources"] = [os.path.relpath(DEPLOY, overlay_dir)]
    (overlay_dir / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    rendered = {c["image"] for _, spec in pod_specs(render(overlay_dir))
                for c in spec.get("containers", []) + spec.get("initContainers", [])}
    assert rendered == {f"{entry['newName']}:{entry['newTag']}"}
