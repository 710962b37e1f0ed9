"""Start-up fails fast, in one line that says what to fix, when NATS or the kubeconfig is missing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ingest.config import IngestConfig
from ingest.service import Ingest, run_ingest
from runtime.bus import NatsUnavailable
from runtime.kubeconfig import KubeconfigError
from runtime.ports import free_port


async def test_nats_that_does_not_answer_is_named(config: IngestConfig) -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    with pytest.raises(NatsUnavailable, match=url):
        await run_ingest(dataclasses.replace(config, nats_url=url))


async def test_a_missing_kubeconfig_is_named(config: IngestConfig, tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(KubeconfigError, match=str(missing)):
        await run_ingest(dataclasses.replace(config, kubeconfig=str(missing)))


def test_an_unknown_kind_is_refused_before_anything_starts(config: IngestConfig) -> None:
    with pytest.raises(ValueError, match="Deployment"):
        Ingest(dataclasses.replace(config, kinds=("Pod", "Deployment")))
