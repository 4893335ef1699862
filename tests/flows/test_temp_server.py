"""The temporary server starts before parsing only where a command surely needs one, handed over once."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardwise.flows import temp_server


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[temp_server.TemporaryServer]:
    """Servers launched (none really started), from a folder without Prefect settings files."""
    started: list[temp_server.TemporaryServer] = []

    def launch(self: temp_server.TemporaryServer, settings: bool = True) -> temp_server.TemporaryServer:
        started.append(self)
        return self

    monkeypatch.setattr(temp_server.TemporaryServer, "launch", launch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))
    for name in ("PREFECT_API_URL", "PREFECT_PROFILES_PATH"):
        monkeypatch.delenv(name, raising=False)
    yield started
    temp_server.take_early()


def test_a_run_starts_its_server_early_and_hands_it_over_once(launches: list) -> None:
    temp_server.start_early(["run", "--source", "data", "--results", "sqlite:///r.db"])
    assert len(launches) == 1
    assert temp_server.take_early() is launches[0]
    assert temp_server.take_early() is None


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["runs"],
        ["plan", "--source", "data"],
        ["run", "--help"],
        ["run", "-h"],
    ],
)
def test_no_early_server_for_commands_that_need_none(launches: list, argv: list[str]) -> None:
    temp_server.start_early(argv)
    assert launches == []


def test_no_early_server_when_the_environment_names_a_server(
    launches: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    temp_server.start_early(["run", "--source", "data"])
    assert launches == []


@pytest.mark.parametrize("where", ["profiles", ".env", "prefect.toml", "pyproject.toml"])
def test_no_early_server_when_a_settings_file_may_name_one(
    launches: list, tmp_path: Path, where: str
) -> None:
    if where == "profiles":
        (tmp_path / "prefect-home").mkdir()
        path = tmp_path / "prefect-home" / "profiles.toml"
        path.write_text('[profiles.local]\nPREFECT_API_URL = "http://127.0.0.1:4200/api"\n')
    elif where == ".env":
        (tmp_path / ".env").write_text("PREFECT_API_URL=http://127.0.0.1:4200/api\n")
    elif where == "prefect.toml":
        (tmp_path / "prefect.toml").write_text('[api]\nurl = "http://127.0.0.1:4200/api"\n')
    else:
        (tmp_path / "pyproject.toml").write_text('[tool.prefect.api]\nurl = "http://127.0.0.1:4200/api"\n')
    temp_server.start_early(["run", "--source", "data"])
    assert launches == []


def test_discarding_stops_the_early_server(launches: list, monkeypatch: pytest.MonkeyPatch) -> None:
    stopped: list[object] = []
    monkeypatch.setattr(temp_server.TemporaryServer, "stop", lambda self: stopped.append(self))
    temp_server.start_early(["redrive", "--source", "data"])
    temp_server.discard_early()
    assert stopped == launches and temp_server.take_early() is None
