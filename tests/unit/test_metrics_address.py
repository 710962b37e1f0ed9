"""Where a service serves /metrics, /healthz and /readyz (issue 21, item 2): loopback unless told otherwise, so a
laptop's kubus serves nothing on its other interfaces; `--metrics-bind-address` as controller-runtime spells it
(`:8080` every interface, `0` none) and `--metrics-port`, the port on loopback, as before."""

from __future__ import annotations

import pytest

from kubus.cli import build_parser
from runtime import flags


@pytest.mark.parametrize(("argv", "env", "host", "port"), [
    pytest.param([], {}, "127.0.0.1", 8080, id="default-loopback"),
    pytest.param(["--metrics-port", "9100"], {}, "127.0.0.1", 9100, id="port-on-loopback"),
    pytest.param(["--metrics-port", "0"], {}, "127.0.0.1", 0, id="port-0-off"),
    pytest.param(["--metrics-bind-address", ":8080"], {}, "", 8080, id="every-interface"),
    pytest.param(["--metrics-bind-address", "0.0.0.0:9000"], {}, "0.0.0.0", 9000, id="ipv4-any"),
    pytest.param(["--metrics-bind-address", "[::1]:9001"], {}, "::1", 9001, id="ipv6"),
    pytest.param(["--metrics-bind-address", "0"], {}, "", 0, id="address-0-off"),
    pytest.param([], {"KUBUS_METRICS_BIND_ADDRESS": ":8080"}, "", 8080, id="env-address"),
    pytest.param([], {"KUBUS_METRICS_PORT": "9102"}, "127.0.0.1", 9102, id="env-port"),
    pytest.param([], {"KUBUS_METRICS_PORT": "9102", "KUBUS_METRICS_BIND_ADDRESS": "10.0.0.1:9103"}, "10.0.0.1",
                 9103, id="env-address-over-env-port"),
    pytest.param(["--metrics-port", "9104"], {"KUBUS_METRICS_BIND_ADDRESS": ":8080"}, "127.0.0.1", 9104,
                 id="flag-over-env"),
    pytest.param(["--metrics-bind-address", "127.0.0.1:9105"], {"KUBUS_METRICS_PORT": "1"}, "127.0.0.1", 9105,
                 id="address-flag-over-env-port"),
])
def test_where_metrics_are_served(monkeypatch: pytest.MonkeyPatch, argv: list[str], env: dict[str, str], host: str,
                                  port: int) -> None:
    for variable in ("KUBUS_METRICS_PORT", "KUBUS_METRICS_BIND_ADDRESS"):
        monkeypatch.delenv(variable, raising=False)
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    options = flags.options_of(build_parser().parse_args(["reconcile", *argv]))
    assert (options.metrics_host, options.metrics_port) == (host, port)


@pytest.mark.parametrize(("argv", "said"), [
    pytest.param(["--metrics-bind-address", "8080"], "--metrics-bind-address: not HOST:PORT", id="no-colon"),
    pytest.param(["--metrics-bind-address", "localhost:http"], "--metrics-bind-address: not HOST:PORT",
                 id="port-not-a-number"),
    pytest.param(["--metrics-bind-address", ":70000"], "--metrics-bind-address: not HOST:PORT", id="port-too-big"),
    pytest.param(["--metrics-port", "-1"], "--metrics-port: not a port", id="negative-port"),
    pytest.param(["--metrics-port", "1", "--metrics-bind-address", ":2"], "not allowed with argument",
                 id="both-flags"),
])
def test_bad_addresses_name_the_flag(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                     argv: list[str], said: str) -> None:
    monkeypatch.delenv("KUBUS_METRICS_PORT", raising=False)
    monkeypatch.delenv("KUBUS_METRICS_BIND_ADDRESS", raising=False)
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["execute", *argv])
    assert exited.value.code == 2
    assert said in capsys.readouterr().err
