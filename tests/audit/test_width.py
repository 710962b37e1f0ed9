"""`kubus audit` fits 120 columns by default (issue 24: its rows ran to 255): every subcommand's every line, on the
audit suite's history (idempotency keys of 57 characters, an API message of 100); `-o wide` shows them whole."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
import yaml

from tests.audit.conftest import Audit

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
QUESTIONS = [("pod", "default/web-m4q9z"), ("pod", "default/agent-bbbbb"), ("controller", "default/web"),
             ("controller", "default/agent"), ("failures",), ("slowest",), ("created-per-minute",)]


@pytest.mark.parametrize("question", QUESTIONS, ids=" ".join)
def test_every_line_fits_120_columns(kubus_audit: Audit, question: tuple[str, ...]) -> None:
    code, out, err = kubus_audit(*question, now=NOW)
    assert (code, err) == (0, "")
    too_wide = [line for line in out.splitlines() if len(line) > 120]
    assert not too_wide, "\n".join(too_wide)


@pytest.mark.parametrize("question", [("pod", "default/web-m4q9z"), ("controller", "default/agent"), ("failures",)],
                         ids=" ".join)
def test_wide_shows_what_the_default_leaves_out(kubus_audit: Audit, question: tuple[str, ...]) -> None:
    _, narrow, _ = kubus_audit(*question, now=NOW)
    _, wide, _ = kubus_audit(*question, "-o", "wide", now=NOW)
    assert max(len(line) for line in wide.splitlines()) > 120
    assert "KEY" in wide.split() and "KEY" not in narrow.split()
    assert "..." not in wide


@pytest.mark.parametrize("question", QUESTIONS, ids=" ".join)
def test_json_and_yaml_say_the_same(kubus_audit: Audit, question: tuple[str, ...]) -> None:
    _, as_json, _ = kubus_audit(*question, "-o", "json", now=NOW)
    _, as_yaml, _ = kubus_audit(*question, "-o", "yaml", now=NOW)
    _, old_flag, _ = kubus_audit(*question, "--json", now=NOW)  # the earlier spelling, kept
    assert json.loads(as_json) == yaml.safe_load(as_yaml) == json.loads(old_flag)
