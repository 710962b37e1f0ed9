"""A bad KUBUS_* environment variable is an error of the commands that read it, naming the flag; the other
commands (built by the same parser) are not affected."""

from __future__ import annotations

import pytest

from kubus.cli import build_parser


@pytest.mark.parametrize(("variable", "value", "command", "flag"), [
    ("KUBUS_LEASE_TTL", "abc", ["reconcile"], "--lease-ttl"),
    ("KUBUS_LEASE_TTL", "0", ["reconcile"], "--lease-ttl"),
    ("KUBUS_LEASE_TTL", "soon", ["status"], "--lease-ttl"),
    ("KUBUS_PARTITIONS", "many", ["ingest"], "--partitions"),
    ("KUBUS_METRICS_PORT", "http", ["execute"], "--metrics-port"),
    ("KUBUS_QPS", "fast", ["up"], "--qps"),
    ("KUBUS_STREAM_REPLICAS", "three", ["reconcile"], "--stream-replicas"),
    ("KUBUS_STREAM_REPLICAS", "7", ["up"], "--stream-replicas"),
    ("KUBUS_EVENTS_MAX_BYTES", "lots", ["ingest"], "--events-max-bytes"),
    ("KUBUS_EVENTS_MAX_BYTES", "0", ["execute"], "--events-max-bytes"),
])
def test_a_bad_variable_fails_its_command_naming_the_flag(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str], variable: str,
                                                          value: str, command: list[str], flag: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(command)
    assert exited.value.code == 2
    assert flag in capsys.readouterr().err


@pytest.mark.parametrize("variable", ["KUBUS_LEASE_TTL", "KUBUS_PARTITIONS", "KUBUS_QPS"])
def test_other_commands_do_not_mind(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    monkeypatch.setenv(variable, "not-a-number")
    args = build_parser().parse_args(["audit", "failures"])
    assert (args.command, args.audit_command) == ("audit", "failures") and callable(args.run)


def test_good_values_arrive_as_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBUS_LEASE_TTL", "2.5")
    monkeypatch.setenv("KUBUS_PARTITIONS", "8")
    args = build_parser().parse_args(["reconcile"])
    assert args.lease_ttl == 2.5 and args.partitions == 8


@pytest.mark.parametrize(("command", "value", "size"), [
    (["execute"], "512MiB", 512 * 1024**2),
    (["up"], "4 GiB", 4 * 1024**3),
    (["reconcile"], "2GB", 2 * 1000**3),
    (["ingest"], "1048576", 1024**2),
    (["events", "import", "history.jsonl"], "-1", -1),
])
def test_stream_settings_on_every_command_that_creates_streams(monkeypatch: pytest.MonkeyPatch, command: list[str],
                                                               value: str, size: int) -> None:
    monkeypatch.setenv("KUBUS_STREAM_REPLICAS", "3")
    args = build_parser().parse_args([*command, "--events-max-bytes", value])
    assert (args.stream_replicas, args.events_max_bytes) == (3, size)


def test_stream_settings_default_to_one_replica_and_a_gibibyte_of_events() -> None:
    args = build_parser().parse_args(["up"])
    assert (args.stream_replicas, args.events_max_bytes) == (1, 1024**3)
