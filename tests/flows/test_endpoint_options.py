"""A remote model's options on the command line: its own group of flags, refused for a local model, and
never a key in a message (issue 37). The runs themselves are in tests/models/test_endpoint_generate.py."""

from __future__ import annotations

import sys

import pytest
from cli_helpers import ledger_runs, one_line

from shardwise.flows.cli import _parser, main
from shardwise.flows.cli_options import score_params


def _spec(*options: str):  # -> RunSpec
    args = _parser().parse_args(["run", "--source", "sqlite:///x.db", "--table", "docs", *options])
    return score_params(args).to_spec()


def test_the_flags_reach_the_model_choice_as_the_kind_s_options() -> None:
    spec = _spec(
        "--model", "openai:m", "--api-base", "http://127.0.0.1:8000/v1", "--api-key", "env:MY_KEY",
        "--max-concurrency", "4", "--requests-per-minute", "600", "--endpoint-timeout", "30",
    )  # fmt: skip
    assert spec.model.name == "openai:m"
    assert dict(spec.model.options) == {
        "api_base": "http://127.0.0.1:8000/v1",
        "api_key": "env:MY_KEY",
        "max_concurrency": 4,
        "requests_per_minute": 600,
        "timeout": 30.0,
    }
    assert _spec("--model", "openai:m").model.options == ()  # the kind's defaults
    batch = _spec("--model", "anthropic:m", "--batch-api", "--batch-poll-interval", "5")
    assert dict(batch.model.options) == {"batch_api": True, "batch_poll_s": 5.0}
    assert _spec("--model", "tiny", "--max-concurrency", "16").model.options == ()  # a default is not given


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (
            ["--model", "tiny", "--api-base", "http://127.0.0.1:9/v1", "--endpoint-timeout", "5"],
            "--api-base and --endpoint-timeout would do nothing: they apply to remote models (openai:NAME, "
            "anthropic:NAME, openai-embed:NAME), and model is 'tiny'",
        ),
        (
            ["--model", "tiny", "--batch-api"],
            "--batch-api would do nothing: it applies to remote models",
        ),
        (
            ["--model", "openai-embed:e", "--batch-api"],
            "--batch-api sends chat requests, and model 'openai-embed:e' is an embeddings model; drop "
            "--batch-api",
        ),
        (
            ["--model", "openai:m", "--api-key", "sk-live-abcdef123456"],
            "api_key must name where the key is, env:NAME or secret:NAME; the value given is not shown",
        ),
        (
            ["--model", "openai:m", "--api-base", "http://user:pw-123@127.0.0.1:9/v1"],
            "api_base 'http://127.0.0.1:9/v1' carries credentials or a query",
        ),
        (
            ["--model", "openai:m", "--api-key", "env:SHARDWISE_NO_SUCH_KEY_VARIABLE"],
            "SHARDWISE_NO_SUCH_KEY_VARIABLE",
        ),
    ],
)
def test_a_bad_endpoint_option_is_one_line_before_anything_runs_and_shows_no_key(
    docs: str, options: list[str], said: str, capfd: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "--source", docs, "--table", "docs", *options])
    err = one_line(capfd)
    assert code == 2, err
    assert said in err, err
    for secret in ("sk-live", "abcdef123456", "pw-123"):
        assert secret not in err, err
    assert ledger_runs(docs) == 0


@pytest.mark.parametrize(
    ("reference", "fix"),
    [
        ("env:SHARDWISE_NO_SUCH_KEY_VARIABLE", "export SHARDWISE_NO_SUCH_KEY_VARIABLE=<the API key> there"),
        ("secret:shardwise-no-such-key", "create it holding the API key: prefect block create secret"),
    ],
)
def test_a_key_reference_that_names_nothing_set_is_advised_as_a_key_not_a_url(
    docs: str, reference: str, fix: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """Issue 45 item 6: the fix for an unset key is to set the key where the reference points; a key is no
    URL, and it is never given inline."""
    code = main(["run", "--source", docs, "--table", "docs", "--model", "openai:m", "--api-key", reference])
    err = one_line(capfd)
    assert code == 2, err
    assert f"api_key {reference!r} names" in err and fix in err, err
    assert "the key itself is never given" in err, err
    assert "<url>" not in err and "URL itself" not in err, err
    assert ledger_runs(docs) == 0


@pytest.mark.parametrize(
    ("model", "missing"),
    [
        ("openai:m", "pyrate_limiter"),  # vLLM brings openai: the SDK alone is no sign of the extra
        ("openai:m", "genai_prices"),
        ("anthropic:m", "anthropic"),
        ("openai-embed:e", "openai"),
    ],
)
def test_a_remote_model_without_the_endpoints_extra_is_refused_before_anything_runs(
    docs: str, model: str, missing: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Issue 45 item 2: once found inside the first shard (exit 1, a failed run in the ledger)."""
    monkeypatch.setitem(sys.modules, missing, None)  # import (and find_spec) of it finds nothing
    monkeypatch.setenv("SHARDWISE_TEST_KEY", "sk-not-shown-123")
    argv = ["run", "--source", docs, "--table", "docs", "--model", model,
            "--api-key", "env:SHARDWISE_TEST_KEY", "--api-base", "http://127.0.0.1:9/v1"]  # fmt: skip
    code = main(argv)
    err = one_line(capfd)
    assert code == 2, err
    assert f"model {model!r} is a remote model, and the {missing} package is not installed" in err, err
    assert "pip install 'shardwise[endpoints]'" in err and "sk-not-shown" not in err, err
    assert ledger_runs(docs) == 0


def test_a_base_url_with_nothing_listening_exits_3_in_one_line_before_any_flow_run(
    docs: str, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on once it is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("SHARDWISE_TEST_UNREACHABLE_KEY", "sk-not-shown-123")
    argv = ["run", "--source", docs, "--table", "docs", "--model", "openai:m", "--api-base",
            f"http://127.0.0.1:{port}/v1", "--api-key", "env:SHARDWISE_TEST_UNREACHABLE_KEY"]  # fmt: skip
    code = main(argv)
    err = one_line(capfd)
    assert code == 3, err
    assert f"127.0.0.1:{port}" in err and "sk-not-shown" not in err, err
    assert ledger_runs(docs) == 0
