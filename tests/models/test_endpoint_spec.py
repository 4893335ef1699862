"""Endpoint specs without a server: names, options, versions, pickling, and how SDK errors are sorted."""

from __future__ import annotations

import pickle

import pytest

from shardwise.errors import ConfigError, UnknownModelError
from shardwise.model.generation import GenerationSettings
from shardwise.model.run_bound import bind
from shardwise.models import check_deployment_model, get_spec
from shardwise.models.endpoints import EmbeddingSpec, EndpointOptions, EndpointSpec, is_endpoint_name
from shardwise.models.endpoints.options import endpoint_address
from shardwise.retry_policy import RetryPolicy


def _resolve(connection: str) -> str:  # module level: a spec holding it pickles
    return "sk-secret-value"


def test_names_choose_a_provider_and_a_kind() -> None:
    chat = get_spec("openai:gpt-4o-mini")
    assert isinstance(chat, EndpointSpec) and chat.provider == "openai" and chat.model_name == "gpt-4o-mini"
    assert isinstance(get_spec("anthropic:claude-x"), EndpointSpec)
    embed = get_spec("openai-embed:text-embedding-3-small")
    assert isinstance(embed, EmbeddingSpec) and embed.name == "openai-embed:text-embedding-3-small"
    assert is_endpoint_name("anthropic:m") and not is_endpoint_name("minilm")
    check_deployment_model("openai:gpt4o", None)  # a provider, not a module: deployments may name it
    with pytest.raises(ConfigError, match="names no model"):
        get_spec("anthropic:")
    with pytest.raises(UnknownModelError, match="openai:NAME"):
        get_spec("no-such-model-anywhere")


def test_a_key_or_a_base_with_credentials_is_refused_without_echoing_it() -> None:
    from pydantic import ValidationError

    with pytest.raises(ConfigError) as literal:
        EndpointOptions.of({"api_key": "sk-live-abcdef123456"})
    assert "sk-live" not in str(literal.value) and "api_key" in str(literal.value)
    assert "env:NAME" in str(literal.value)
    with pytest.raises(ValidationError) as direct:  # pydantic's own message quotes no input either
        EndpointOptions(api_key="sk-live-abcdef123456")
    assert "sk-live" not in str(direct.value)
    with pytest.raises(ConfigError) as inline:
        EndpointOptions.of({"api_base": "https://user:hunter2secret@api.example.com/v1"})
    assert "hunter2secret" not in str(inline.value) and "https://api.example.com/v1" in str(inline.value)
    with pytest.raises(ConfigError, match="not an http"):
        EndpointOptions.of({"api_base": "ftp://example.com"})
    assert EndpointOptions.of({"max_concurrency": 4}).max_concurrency == 4
    assert endpoint_address("https://u:p@h.example:8443/v1/?k=v#f") == "https://h.example:8443/v1"


def test_the_version_is_the_endpoint_model_and_settings_never_the_limits_or_key() -> None:
    base = EndpointSpec("openai", "m", EndpointOptions(api_base="http://127.0.0.1:8000/v1"))
    version = base.describe().version
    same = [
        base.configured(EndpointOptions(api_base="http://127.0.0.1:8000/v1/", api_key="env:OTHER")),
        base.configured(
            EndpointOptions(api_base="http://127.0.0.1:8000/v1", max_concurrency=3, requests_per_minute=10)
        ),
        base.retrying(RetryPolicy(deadline_s=5)).resolving(_resolve),
    ]
    assert {s.describe().version for s in same} == {version}
    other = [
        base.configured(EndpointOptions(api_base="http://127.0.0.1:8001/v1")),
        EndpointSpec("openai", "m2", base.options),
        EndpointSpec("anthropic", "m", base.options),
        base.generating(GenerationSettings(prompt="Q: {text}")),
        base.generating(GenerationSettings(chat="off")),
    ]
    assert len({s.describe().version for s in other} | {version}) == len(other) + 1
    schema = base.generating(GenerationSettings(json_schema='{"type": "object"}'))
    assert [c.name for c in schema.describe().outputs][-1] == "parsed"


def test_a_spec_pickles_with_its_resolver_and_never_holds_the_key() -> None:
    spec = EndpointSpec("openai", "m", EndpointOptions(api_key="env:K")).resolving(_resolve)
    data = pickle.dumps(spec)
    assert b"sk-secret-value" not in data and pickle.loads(data) == spec
    assert "sk-secret-value" not in repr(spec)


def test_settings_an_endpoint_cannot_honour_are_refused() -> None:
    with pytest.raises(ConfigError, match="drop --engine"):
        EndpointSpec("openai", "m", generation=GenerationSettings(engine="vllm"))
    with pytest.raises(ConfigError, match="Anthropic's Messages API takes chat messages only"):
        EndpointSpec("anthropic", "m", generation=GenerationSettings(chat="off"))
    with pytest.raises(ConfigError, match="provider must be one of openai, anthropic"):
        EndpointSpec("cohere", "m")  # type: ignore[arg-type]


def test_sdk_errors_are_sorted_by_status() -> None:
    openai = pytest.importorskip("openai")
    import httpx2

    from shardwise.models.endpoints.failures import classify

    request = httpx2.Request("POST", "http://127.0.0.1:1/v1/chat/completions")

    def status(code: int, headers: dict[str, str] | None = None, message: str = "no") -> object:
        response = httpx2.Response(code, headers=headers or {}, request=request)
        return openai.APIStatusError(message, response=response, body={"error": {"message": message}})

    throttled = classify(status(429, {"retry-after": "3"}, "slow down"))
    assert throttled is not None and throttled.kind == "transient" and throttled.retry_after == 3.0
    assert classify(status(429, {"retry-after-ms": "250"})).retry_after == 0.25  # type: ignore[union-attr]
    assert classify(status(503)).kind == "transient"  # type: ignore[union-attr]
    assert classify(status(401)).kind == "config"  # type: ignore[union-attr]
    assert classify(status(404)).kind == "config"  # type: ignore[union-attr]
    row = classify(status(400, message="maximum context length is 512 tokens"))
    assert row is not None and row.kind == "row" and row.reason == "400 maximum context length is 512 tokens"
    dropped = classify(openai.APIConnectionError(request=request))
    assert dropped is not None and dropped.kind == "transient"
    assert classify(ValueError("not the SDK's")) is None


def test_a_run_binds_its_options_resolver_and_policy_to_a_remote_spec_only() -> None:
    given = {"api_base": "http://127.0.0.1:9/v1", "api_key": "env:K", "max_concurrency": 2}
    policy = RetryPolicy(deadline_s=7)
    for name in ("openai:m", "anthropic:m", "openai-embed:m"):
        spec = bind(get_spec(name), given, _resolve, policy)
        assert spec.options == EndpointOptions(**given) and spec.retry == policy  # type: ignore[attr-defined]
        assert spec.resolve is _resolve  # type: ignore[attr-defined]
    own = get_spec("openai:m").configured(EndpointOptions(**given))  # type: ignore[attr-defined]
    assert bind(own, {}, _resolve, policy).options == own.options, "no run options: the spec keeps its own"
    tiny = get_spec("tiny")
    assert bind(tiny, {}, _resolve, policy) is tiny
    with pytest.raises(ConfigError, match=r"model 'tiny' takes no model options \(api_base, api_key"):
        bind(tiny, given, _resolve, policy)
    with pytest.raises(ConfigError) as refused:
        bind(get_spec("openai:m"), {"api_key": "sk-secret-typed-here"}, _resolve, policy)
    said = str(refused.value)
    assert "sk-secret" not in said and "api_key must name where the key is" in said


def test_a_chunk_is_cut_to_the_providers_batch_limits() -> None:
    from shardwise.models.endpoints.batches import LIMITS, cut

    most, most_bytes = LIMITS["openai"]
    assert [len(run) for run in cut(list(range(most + 5)), lambda _: 10, "openai")] == [most, 5]
    big = most_bytes // 3 + 1  # three of these do not fit one file
    assert [len(run) for run in cut([0] * 7, lambda _: big, "openai")] == [2, 2, 2, 1]
    assert [len(run) for run in cut(list(range(60_000)), lambda _: 10, "anthropic")] == [60_000]
    assert cut([], lambda _: 1, "openai") == []
