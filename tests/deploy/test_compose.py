"""compose.yaml, parsed (issue 16, 9): the schema before the services, ports on 127.0.0.1 only, one image, NATS
with a user per service, the kubeconfig only where the API is called, the sim first when its profile runs."""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

import pytest
import yaml

from runtime import natsserver
from tests.deploy.manifests import ROOT

KUBUS = ("migrate", "ingest", "reconciler", "executor", "sim")
SERVICES = ("ingest", "reconciler", "executor")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())  # merge keys (<<) resolved
    return loaded


def _services(compose: dict[str, Any]) -> dict[str, Any]:
    services: dict[str, Any] = compose["services"]
    return services


def test_the_services_wait_for_the_migrate_job(compose: dict[str, Any]) -> None:
    services = _services(compose)
    assert services["migrate"]["command"] == ["db", "upgrade"]
    assert services["migrate"]["restart"] == "no"
    for name in SERVICES:
        depends = services[name]["depends_on"]
        assert depends["migrate"] == {"condition": "service_completed_successfully"}, name
        assert depends["nats"] == {"condition": "service_healthy"}, name


def test_the_sim_profiles_services_wait_for_the_sim(compose: dict[str, Any]) -> None:
    services = _services(compose)
    assert services["sim"]["profiles"] == ["sim"]
    assert "healthcheck" in services["sim"]
    for name in SERVICES:
        # required: false: without --profile sim there is no sim to wait for
        assert services[name]["depends_on"]["sim"] == {"condition": "service_healthy", "required": False}, name


def test_ports_are_bound_to_the_loopback_only(compose: dict[str, Any]) -> None:
    published = 0
    for name, service in _services(compose).items():
        for port in service.get("ports") or ():
            assert isinstance(port, str) and port.startswith("127.0.0.1:"), f"{name} publishes {port!r}"
            published += 1
    assert published == 3  # nats, postgres, sim


def test_one_image_for_every_kubus_service(compose: dict[str, Any]) -> None:
    services = _services(compose)
    images = {services[name]["image"] for name in KUBUS}
    assert len(images) == 1, images
    assert {services[name]["build"] for name in KUBUS} == {"."}


def test_nats_needs_a_user_and_each_service_has_its_own(compose: dict[str, Any]) -> None:
    nats = _services(compose)["nats"]
    assert nats["command"] == ["-c", "/etc/nats/nats.conf"]
    (mount,) = [v for v in nats["volumes"] if v.endswith(":/etc/nats/nats.conf:ro")]
    conf = (ROOT / mount.split(":")[0]).read_text()
    users = dict(re.findall(r"\{user: (\w+), password: \$(\w+)\}", conf))
    assert set(users) == set(SERVICES), conf
    assert "authorization" in conf and "jetstream" in conf
    for name in SERVICES:
        env = _services(compose)[name]["environment"]
        assert env["KUBUS_NATS_USER"] == name, name
        # the password the server reads for that user is the one the service sends
        server_side = nats["environment"][users[name]]
        assert env["KUBUS_NATS_PASSWORD"] == server_side, name
    assert "KUBUS_NATS_USER" not in _services(compose)["migrate"].get("environment", {})


def test_only_ingest_and_the_executor_see_the_kubeconfig(compose: dict[str, Any]) -> None:
    services = _services(compose)
    for name in ("migrate", *SERVICES):
        mounts = [v for v in services[name].get("volumes") or () if ":/kube" in v]
        env = services[name].get("environment") or {}
        if name in ("ingest", "executor"):
            assert mounts == ["${KUBECONFIG_DIR:-kube}:/kube:ro"] and env["KUBECONFIG"] == "/kube/config", name
        else:
            assert not mounts and "KUBECONFIG" not in env, name
    # and only those that open the store get its URL
    assert {n for n in ("migrate", *SERVICES) if "KUBUS_DB_URL" in (services[n].get("environment") or {})} == {
        "migrate", "ingest", "reconciler"}


def test_the_services_run_read_only(compose: dict[str, Any]) -> None:
    for name in ("migrate", *SERVICES):
        service = _services(compose)[name]
        assert service["read_only"] is True and "/tmp" in service["tmpfs"], name


def test_the_nats_config_is_one_nats_server_accepts(compose: dict[str, Any]) -> None:
    env = {**os.environ, **{k: "x" for k in _services(compose)["nats"]["environment"]}}
    result = subprocess.run([natsserver.binary(), "-c", str(ROOT / "deploy/compose/nats.conf"), "-t"],
                            capture_output=True, text=True, env=env, timeout=30)
    assert result.returncode == 0 and "is valid" in result.stdout + result.stderr, result.stderr
