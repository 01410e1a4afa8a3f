"""What a SuperLink bound beyond loopback exposes: named in a warning, printed and logged."""

from __future__ import annotations

import logging

import pytest
from typer.testing import CliRunner

from simulations.cli import app
from simulations.deploy.hosts import exposure_warnings, is_loopback
from simulations.deploy.processes import free_port

cli = CliRunner()


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("127.0.0.53", True), ("::1", True),
                                            ("[::1]", True), ("localhost", True), ("0.0.0.0", False), ("::", False),
                                            ("10.0.0.5", False), ("superlink.lab.example", False)])
def test_only_loopback_counts_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_a_loopback_superlink_exposes_nothing() -> None:
    assert exposure_warnings("127.0.0.1", 9093, "127.0.0.1:9092", insecure=False) == []


def test_a_public_control_api_and_fleet_api_are_named_with_what_they_expose() -> None:
    control, fleet = exposure_warnings("0.0.0.0", 9093, "10.0.0.5:9092", insecure=True)
    assert control.startswith("--host 0.0.0.0 exposes the SuperLink's Control API and its Runtime API on every "
                              "interface: anyone who reaches 0.0.0.0:9093 can submit runs")
    assert "Bind it to loopback (--host 127.0.0.1" in control and "firewall port 9093" in control
    assert fleet.startswith("--fleet-address 10.0.0.5:9092 exposes the Fleet API on 10.0.0.5, reachable from other "
                            "machines")
    assert "with --insecure anyone who reaches it can join the federation" in fleet
    (fleet,) = exposure_warnings("127.0.0.1", 9093, "0.0.0.0:9092", insecure=False)
    assert "on every interface" in fleet and "only registered node keys can join" in fleet


def test_deploy_superlink_on_a_public_host_warns_on_screen_and_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    port, fleet = free_port(), free_port()
    with caplog.at_level(logging.WARNING, logger="fedpriv.deploy"):
        result = cli.invoke(app, ["deploy", "superlink", "--host", "0.0.0.0", "--port", str(port),
                                  "--fleet-address", f"127.0.0.1:{fleet}"])
    out = _flat(result.output)
    assert result.exit_code == 2 and "--certs DIR is required" in out  # stops before starting anything
    assert (f"WARNING: --host 0.0.0.0 exposes the SuperLink's Control API and its Runtime API on every interface: "
            f"anyone who reaches 0.0.0.0:{port} can submit runs") in out
    assert [r.getMessage()[:60] for r in caplog.records] == [
        "--host 0.0.0.0 exposes the SuperLink's Control API and its R"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fedpriv.deploy"):
        quiet = cli.invoke(app, ["deploy", "superlink", "--port", str(port), "--fleet-address", f"127.0.0.1:{fleet}"])
    assert quiet.exit_code == 2 and "WARNING" not in quiet.output and not caplog.records
