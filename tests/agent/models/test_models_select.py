"""get_model: spec strings pick the backend; options are checked; LiteLLM models fail early and clearly."""

from __future__ import annotations

import pytest

from agent.models import RetryPolicy, get_model
from agent.models.common import apply_prices, completions_of
from agent.models.litellm_model import LiteLLMModel
from agent.models.openai_compat import OpenAICompatModel, parse_target
from results.errors import UserError

KEY_VARS = ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENROUTER_API_KEY"]


@pytest.fixture
def no_keys(monkeypatch):
    for var in KEY_VARS:
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize(
    "target,expected",
    [
        ("http://127.0.0.1:8000/v1/smollm2-135m", ("http://127.0.0.1:8000/v1", "smollm2-135m")),
        ("http://gpu:8000/v1/meta-llama/Llama-3.1-8B", ("http://gpu:8000/v1", "meta-llama/Llama-3.1-8B")),
        ("https://host/api/openai/v1/m:7b", ("https://host/api/openai/v1", "m:7b")),
    ],
)
def test_openai_compat_targets(target, expected):
    assert parse_target(target) == expected


def test_openai_compat_spec_and_options():
    model = get_model(
        "openai-compat:http://127.0.0.1:9/v1/qwen/Qwen2.5-7B",
        context_window="32768",
        supports_tools="true",
        timeout=5,
        max_attempts="2",
        price_in=1,
        price_out=2,
    )
    assert isinstance(model, OpenAICompatModel)
    assert (model.base_url, model.model) == ("http://127.0.0.1:9/v1", "qwen/Qwen2.5-7B")
    assert model.name == "openai-compat:http://127.0.0.1:9/v1/qwen/Qwen2.5-7B"
    assert model.context_window == 32768 and model.supports_tools is True
    assert (model.retry.timeout, model.retry.max_attempts) == (5.0, 2)
    by_option = get_model("openai-compat:llama3", base_url="http://127.0.0.1:11434/v1/")
    assert (by_option.base_url, by_option.model, by_option.supports_tools) == (
        "http://127.0.0.1:11434/v1",
        "llama3",
        False,
    )


@pytest.mark.parametrize(
    "spec", ["openai-compat:http://127.0.0.1:8000/smollm2", "openai-compat:llama3", "openai-compat:"]
)
def test_openai_compat_without_server_or_model_is_a_user_error(spec):
    with pytest.raises(UserError, match="openai-compat"):
        get_model(spec)


def test_unknown_and_bad_options_are_user_errors():
    with pytest.raises(UserError, match="unknown option.*adapter"):
        get_model("openai-compat:http://h:1/v1/m", adapter="/x")
    with pytest.raises(UserError, match="price_in"):
        get_model("openai-compat:http://h:1/v1/m", price_in="cheap")
    with pytest.raises(UserError, match="supports_tools"):
        get_model("openai-compat:http://h:1/v1/m", supports_tools="maybe")
    with pytest.raises(UserError, match="no model"):
        get_model("  ")


def test_unknown_model_string_names_the_fix(no_keys):
    with pytest.raises(UserError) as err:
        get_model("gpt-nonexistent-thing")
    assert "openai/gpt-4o-mini" in str(err.value) and "local:smollm2-135m" in str(err.value)


@pytest.mark.parametrize(
    "spec,var",
    [
        ("openai/gpt-4o-mini", "OPENAI_API_KEY"),
        ("anthropic/claude-3-5-haiku-latest", "ANTHROPIC_API_KEY"),
        ("openrouter/meta-llama/llama-3.1-8b-instruct", "OPENROUTER_API_KEY"),
    ],
)
def test_missing_api_key_names_the_env_var(no_keys, spec, var):
    with pytest.raises(UserError, match=var):
        get_model(spec)


def test_known_litellm_model_metadata(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model = get_model("openai/gpt-4o-mini", retry=RetryPolicy(max_attempts=2))
    assert isinstance(model, LiteLLMModel)
    assert model.supports_tools is True and model.context_window >= 100_000
    assert model.retry.max_attempts == 2


def test_litellm_cost_comes_from_the_price_map(monkeypatch):
    from agent.models.common import import_litellm

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model = get_model("openai/gpt-4o-mini")
    litellm = import_litellm()
    million = {"prompt_tokens": 1_000_000, "completion_tokens": 1_000_000, "total_tokens": 2_000_000}
    choices = [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop", "index": 0}]
    known = litellm.ModelResponse(model="gpt-4o-mini", choices=choices, usage=million)
    renamed = litellm.ModelResponse(model="some-deployment-alias", choices=choices, usage=million)
    assert model._cost(known) > 0
    assert model._cost(renamed) == model._cost(known)  # falls back to the name we asked for


def test_unmapped_litellm_model_gets_safe_defaults(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model = get_model("openai/some-private-finetune-xyz")
    assert model.supports_tools is False and model.context_window == 8192
    response = {
        "choices": [{"message": {"content": "x"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
    assert model._cost(response) == 0.0  # unknown price: free, never an exception


def test_ollama_needs_no_key(no_keys, monkeypatch):
    monkeypatch.delenv("OLLAMA_API_BASE", raising=False)
    assert get_model("ollama/llama3").name == "ollama/llama3"


def test_completions_of_splits_usage_and_parses_tool_calls():
    response = {
        "choices": [
            {"message": {"content": "a"}, "finish_reason": "stop"},
            {
                "message": {
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "function": {"name": "bash", "arguments": '{"command": "ls"}'}},
                        {"id": "c2", "function": {"name": "bash", "arguments": "{not json"}},
                    ],
                },
                "finish_reason": "tool_calls",
            },
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 7},
    }
    a, b = completions_of(response)
    assert (a.prompt_tokens, a.completion_tokens, b.completion_tokens) == (10, 4, 3)
    assert b.content == "" and b.tool_calls[0].arguments == {"command": "ls"}
    assert b.tool_calls[1].arguments == {"_raw": "{not json"}
    apply_prices([a, b], price_in=1.0, price_out=2.0)  # USD per 1M tokens; the prompt is billed once
    assert a.cost + b.cost == pytest.approx((10 * 1.0 + 7 * 2.0) / 1e6)


def test_return_token_ids_is_an_openai_compat_option():
    from agent.models import parse_model_options

    options = parse_model_options("openai-compat:http://h:1/v1/m", ["return_token_ids=true", "top_k=5"])
    assert options == {"return_token_ids": "true", "extra_params": {"top_k": 5}}
    asked = get_model("openai-compat:http://h:1/v1/m", **options)
    assert asked.extra_params == {"top_k": 5, "return_token_ids": True}
    assert "return_token_ids" not in get_model("openai-compat:http://h:1/v1/m").extra_params
    with pytest.raises(UserError, match="return_token_ids"):
        get_model("openai-compat:http://h:1/v1/m", return_token_ids="sometimes")
    with pytest.raises(UserError, match="unknown option.*return_token_ids"):
        get_model("local:smollm2-135m", return_token_ids=True)  # a local model records its ids anyway


def echo_backend(target, spec, options):
    """A backend registered by test_a_new_backend_is_one_registration: its Model is the replay model."""
    from agent.models.replay import ReplayModel

    return ReplayModel({}, name=f"{spec}|{target}|{options.int('depth')}")


def plugin_backend(target, spec, options):
    """A backend named by its dotted path (py:MODULE:FUNCTION:TARGET): the options it lists are its own."""
    from agent.models.replay import ReplayModel

    return ReplayModel({}, name=f"{spec}|{target}|{options.int('depth')}")


plugin_backend.OPTIONS = {"depth"}


def test_a_plugin_backend_by_entry_point_or_dotted_path(monkeypatch):
    import agent.models as models
    from results import plugins

    path = "tests.agent.models.test_models_select:plugin_backend"
    model = get_model(f"py:{path}:abc", depth="3", price_in=1)
    assert model.name == f"py:{path}:abc|abc|3"
    assert get_model(f"py:{path}").name == f"py:{path}||None"  # the target is optional
    with pytest.raises(UserError, match="unknown option.*top_p"):
        get_model(f"py:{path}:abc", top_p=0.9)
    with pytest.raises(UserError, match="write py:MODULE:FUNCTION"):
        get_model("py:tests.agent.models.test_models_select")
    with pytest.raises(UserError, match="no module 'nowhere_at_all'"):
        get_model("py:nowhere_at_all:from_spec:x")
    real = plugins.installed
    monkeypatch.setattr(plugins, "installed", lambda r: {"echo2": path} if r == "models" else real(r))
    assert models.backend("echo2:x").name == "echo2" and get_model("echo2:x", depth=1).name == "echo2:x|x|1"
    assert models.backend("local:x").name == "local"  # a registered prefix comes first


def test_a_new_backend_is_one_registration(monkeypatch):
    """A model backend is a module with a build function and one register() line: the spec's prefix
    selects it, its options are checked, and -M keys it does not know are refused (no extra_params)."""
    import agent.models as models

    monkeypatch.setattr(models, "BACKENDS", dict(models.BACKENDS))
    models.register("echo", "tests.agent.models.test_models_select:echo_backend", {"depth"})
    model = get_model("echo:abc", depth="3")
    assert model.name == "echo:abc|abc|3"
    assert models.backend("echo:x").name == "echo" and models.backend("nope:x").name == "litellm"
    with pytest.raises(UserError, match="unknown option.*temperature.*echo backend"):
        get_model("echo:abc", temperature=1)
    with pytest.raises(UserError, match="the echo backend has no option 'top_p'"):
        models.parse_model_options("echo:abc", ["top_p=0.9"])
    with pytest.raises(ValueError, match="registered twice"):
        models.register("echo", "x:y", set())
