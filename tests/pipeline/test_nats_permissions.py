"""The pipeline against a nats-server configured with docs/nats-permissions.conf, verbatim: one least-privilege
user per service, the streams created by the admin user (`kubus streams ensure`). It converges with no
permission violation anywhere; an identity cannot publish what is not its service's (ingest: an action); a
service without credentials, or with a wrong password, exits at once with one line naming the refusal."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import nats
import nats.errors
import pytest

from tests.pipeline.harness import SERVICES, Pipeline
from tests.simulation import wait_for

pytestmark = pytest.mark.slow

CONFIG = Path(__file__).resolve().parents[2] / "docs" / "nats-permissions.conf"
PASSWORDS = {"admin": "admin-secret-1", "ingest": "ingest-secret-2", "reconciler": "reconciler-secret-3",
             "executor": "executor-secret-4"}
USER_OF = {"ingest": "ingest", "reconcile": "reconciler", "execute": "executor"}


def identity(who: str) -> dict[str, str]:
    return {"KUBUS_NATS_USER": f"kubus-{who}", "KUBUS_NATS_PASSWORD": PASSWORDS[who]}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    p = Pipeline(tmp_path_factory.mktemp("natsauth"), nats_config=CONFIG, prefix="kubus", metrics=True,
                 nats_env={f"KUBUS_{who.upper()}_PASSWORD": pw for who, pw in PASSWORDS.items()},
                 env_for={service: identity(USER_OF[service]) for service in SERVICES})
    yield p
    p.stop()


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def kubus(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith("KUBUS_NATS_")}
    return subprocess.run([sys.executable, "-m", "kubus", *args], capture_output=True, text=True, timeout=90,
                          env={**base, **(env or {})})


def violations(p: Pipeline) -> list[str]:
    text = (p.workdir / "nats.log").read_text()
    return [line for line in text.splitlines() if "violation" in line.lower()]


def test_least_privilege_pipeline_converges(pipeline: Pipeline) -> None:
    p = pipeline
    wait_for(lambda: listening(p.nats_port), timeout=15, what="nats-server listening")
    ensured = kubus("streams", "ensure", "--nats-url", p.nats_url, "--partitions", "4", env=identity("admin"))
    assert ensured.returncode == 0, ensured.stderr
    assert "KUBUS_ACTIONS" in ensured.stdout.split()
    p.start_all()
    p.ask_for_pods("least", 5)
    pods = p.wait_for_pods("least", 5)
    assert all(pod["metadata"]["ownerReferences"][0]["name"] == "web" for pod in pods)
    wait_for(lambda: p.sql("select count(*) from action_results where outcome = 'succeeded'")[0][0] >= 1,
             timeout=30, what="a succeeded result recorded by the reconciler")
    # issue 25: with the direct get of KUBUS_STATE, each deleted pod's last state there vouches for it: one request
    # per deleted pod (the DELETE, with that version as its precondition), no GET
    checks = "kubus_executor_ownership_checks_total"
    assert p.metric("execute", checks, by="read") == 0
    deletes_before = p.metric("execute", "rest_client_requests_total", method="DELETE")
    code, body = p.sim.request("PATCH", "/apis/apps/v1/namespaces/least/replicasets/web/scale",
                               {"spec": {"replicas": 2}}, "application/merge-patch+json")
    assert code == 200, body
    wait_for(lambda: p.metric("execute", checks, by="index") >= 3, timeout=30, what="3 deletes checked on KUBUS_STATE")
    wait_for(lambda: len([q for q in p.pods("least") if not q["metadata"].get("deletionTimestamp")]) == 2,
             timeout=30, what="3 pods deleted")
    assert p.metric("execute", checks, by="index") == 3
    assert p.metric("execute", checks, by="read") == 0 and p.metric("execute", checks, by="stale") == 0
    assert p.metric("execute", "rest_client_requests_total", method="DELETE") - deletes_before == 3
    assert p.restarts == dict.fromkeys(SERVICES, 0), p.logs()
    assert violations(p) == [], p.logs()
    for service in SERVICES:
        log = (p.workdir / f"{service}.log").read_text()
        assert "violation" not in log.lower(), log[-3000:]
        for secret in PASSWORDS.values():
            assert secret not in log


async def published_as(p: Pipeline, who: str, subject: str) -> list[str]:
    """Publishes one message on `subject` as `who`; what NATS said about it (permission errors)."""
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    nc = await nats.connect(p.nats_url, user=f"kubus-{who}", password=PASSWORDS[who], error_cb=on_error,
                            allow_reconnect=False)
    try:
        await nc.publish(subject, b'{"kind": "CreatePods"}')
        await nc.flush()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while not errors and loop.time() < deadline:
            await asyncio.sleep(0.05)  # the server's -ERR arrives after the flush's PONG, or not at all
        return errors
    finally:
        await nc.close()


async def test_ingest_cannot_publish_an_action(pipeline: Pipeline) -> None:
    p = pipeline
    wait_for(lambda: listening(p.nats_port), timeout=15, what="nats-server listening")
    errors = await published_as(p, "ingest", "kubus.actions.0")
    assert any('permissions violation for publish to "kubus.actions.0"' in e.lower() for e in errors), errors
    # nor may the executor forge an event, nor the reconciler a result
    assert await published_as(p, "executor", "kubus.events.0.Pod.x")
    assert await published_as(p, "reconciler", "kubus.results.0")
    # and what each may publish goes through
    assert await published_as(p, "admin", "kubus.nothing") == []


@pytest.mark.parametrize("service", SERVICES)
def test_without_credentials_a_service_exits_naming_the_refusal(pipeline: Pipeline, service: str,
                                                                 tmp_path: Path) -> None:
    p = pipeline
    wait_for(lambda: listening(p.nats_port), timeout=15, what="nats-server listening")
    common = ["--nats-url", p.nats_url, "--data-dir", str(tmp_path), "--metrics-port", "0",
              *([] if service == "reconcile" else ["--kubeconfig", str(p.sim.kubeconfig)])]
    result = kubus(service, *common)
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"kubus {service}: NATS at {p.nats_url} refused"), result.stderr
    assert "authorization violation" in last.lower()
    assert "KUBUS_NATS_USER" in last
    assert "Traceback" not in result.stderr
    # a wrong password: the same, and the password is in no output
    wrong = kubus(service, *common, env={"KUBUS_NATS_USER": "kubus-ingest", "KUBUS_NATS_PASSWORD": "not-it-9"})
    assert wrong.returncode == 2, wrong.stderr
    assert "authorization violation" in wrong.stderr.strip().splitlines()[-1].lower()
    assert "not-it-9" not in wrong.stderr + wrong.stdout


def test_a_password_in_the_url_works_and_is_not_printed(pipeline: Pipeline, tmp_path: Path) -> None:
    """user:password in --nats-url authenticates; a failure prints the URL without it."""
    p = pipeline
    wait_for(lambda: listening(p.nats_port), timeout=15, what="nats-server listening")
    good = kubus("streams", "ensure", "--nats-url",
                 f"nats://kubus-admin:{PASSWORDS['admin']}@127.0.0.1:{p.nats_port}", "--partitions", "4")
    assert good.returncode == 0, good.stderr
    assert PASSWORDS["admin"] not in good.stdout + good.stderr
    bad = kubus("streams", "ensure", "--nats-url", f"nats://kubus-admin:wrong-pw-7@127.0.0.1:{p.nats_port}")
    assert bad.returncode == 2
    assert "wrong-pw-7" not in bad.stderr + bad.stdout
    assert "authorization violation" in bad.stderr.lower()


def test_a_service_may_not_create_streams(pipeline: Pipeline, tmp_path: Path) -> None:
    """Least privilege: streams a service finds missing (here, under another prefix) it may not create; it says
    so in one line, pointing at `kubus streams ensure`, instead of waiting for a JetStream that answers."""
    p = pipeline
    wait_for(lambda: listening(p.nats_port), timeout=15, what="nats-server listening")
    result = kubus("execute", "--nats-url", p.nats_url, "--prefix", "other", "--data-dir", str(tmp_path),
                   "--metrics-port", "0", "--kubeconfig", str(p.sim.kubeconfig), env=identity("executor"))
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "may not publish to $JS.API.STREAM.INFO.KUBUS_EVENTS_OTHER" in last, result.stderr
    assert "kubus streams ensure" in last



def test_status_reads_the_bus_with_its_credentials(pipeline: Pipeline, tmp_path: Path) -> None:
    """`kubus status` takes the same NATS credentials as the services (KUBUS_NATS_USER/PASSWORD here, the
    admin's): with them it reads the streams' lag; without, it says NATS refused it, and the SQL part stands."""
    p = pipeline
    wait_for(lambda: listening(p.nats_port), timeout=15, what="nats-server listening")
    url = f"nats://127.0.0.1:{p.nats_port}"
    assert kubus("streams", "ensure", "--nats-url", url, "--partitions", "4", env=identity("admin")).returncode == 0
    assert kubus("db", "upgrade", "--data-dir", str(tmp_path)).returncode == 0
    args = ("status", "--data-dir", str(tmp_path), "--nats-url", url, "--json")
    allowed = kubus(*args, env=identity("admin"))
    assert allowed.returncode == 0, allowed.stderr
    assert json.loads(allowed.stdout)["nats"]["reachable"], allowed.stdout
    refused = kubus(*args)
    assert refused.returncode == 0, refused.stderr
    assert "authorization violation" in str(json.loads(refused.stdout)["nats"]["error"]).lower(), refused.stdout
