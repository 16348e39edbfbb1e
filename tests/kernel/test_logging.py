"""Diagnostics go through the ``tetrarch.*`` loggers: capturable, redirectable, silenceable."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tetrarch._runtime.router._router import PeerUnreachable, Router
from tetrarch._transport._socket import IpcTransport
from tetrarch.testing import scaled

SCENARIO = Path(__file__).parent / "scenarios" / "log_output.py"
pytestmark = pytest.mark.timeout(scaled(60))


@pytest.mark.transport_independent  # pins ipc itself
def test_a_rejected_connection_is_a_warning_of_tetrarch_router(caplog: pytest.LogCaptureFixture) -> None:
    transport, other = IpcTransport(), IpcTransport()
    server = Router(transport, b"s" * 32, name="server")
    intruder = Router(other, b"x" * 32, name="intruder")
    try:
        with caplog.at_level(logging.WARNING, logger="tetrarch"), pytest.raises(PeerUnreachable):
            intruder.send(server.address, [b"never delivered"])
        records = [r for r in caplog.records if r.name == "tetrarch.router" and "rejected connection" in r.message]
        assert records and records[0].levelno == logging.WARNING, caplog.text
    finally:
        intruder.close()
        server.close()
        transport.close()
        other.close()


def _run(run_scenario: Callable[..., Any], mode: str) -> subprocess.CompletedProcess[str]:
    res = run_scenario(SCENARIO, mode, timeout=50)
    assert res.returncode == 0, res.stderr
    return res


@pytest.mark.isolated
def test_unconfigured_clients_see_warnings_on_stderr_as_before(run_scenario) -> None:
    res = _run(run_scenario, "unconfigured")
    assert "tetrarch[client]: rejected connection from peer-1: wrong secret" in res.stderr
    assert "info line" not in res.stderr + res.stdout


@pytest.mark.isolated
def test_an_application_that_configures_logging_gets_the_records_instead(run_scenario) -> None:
    res = _run(run_scenario, "configured")
    assert "APP tetrarch.router WARNING rejected connection from peer-1" in res.stdout
    assert "rejected connection" not in res.stderr, "the fallback must stay quiet once logging is configured"


@pytest.mark.isolated
def test_tetrarch_can_be_silenced(run_scenario) -> None:
    res = _run(run_scenario, "silenced")
    assert "rejected connection" not in res.stderr + res.stdout
