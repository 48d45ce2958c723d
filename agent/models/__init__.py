"""Model backends, chosen by the model string.

    get_model(spec, **options) -> Model

Spec strings:
    local:smollm2-135m                  the embedded SmolLM2-135M-Instruct (default; offline, in-process)
    local:/path/to/hf-model-folder      any Hugging Face model folder (config.json + weights)
    local:/path/to/file.gguf            any GGUF file (dequantized once, then cached)
    openai-compat:http://HOST:PORT/v1/MODEL
                                        any OpenAI-compatible server (vLLM, llama.cpp, Ollama,
                                        `harness serve`);
                                        everything after the first "/v1/" is the model name (slashes allowed).
    openai-compat:MODEL                 the same, with the server given as base_url=http://HOST:PORT/v1
    replay:/path/file                   scripted replies: a JSON object of per-task scripts or a recorded
                                        attempts.jsonl (see agent/models/replay.py)
    NAME:TARGET                         a plugin backend: an installed package's entry point NAME in group
                                        "harness.models" (results/plugins.py), given TARGET
    py:MODULE:FUNCTION[:TARGET]         a plugin backend named by its dotted path, importable from the
                                        Python path (e.g. py:mypkg.echo:from_spec:hello)
    anything else                       LiteLLM: openai/gpt-4o-mini, anthropic/..., gemini/...,
                                        openrouter/..., ollama/...; API keys from the usual env vars
                                        (OPENAI_API_KEY, ...)

Options (unknown ones are a UserError; values may be strings, e.g. from the command line's -M key=value):
    all:            price_in, price_out     USD per 1M prompt/completion tokens; override the cost
    local:          adapter=DIR (PEFT LoRA adapter), seed=INT, device=cpu|cuda
    openai-compat:  base_url, api_key (else OPENAI_COMPAT_API_KEY, else "none"), supports_tools (default
                    false), context_window (default 8192), timeout (s per request), max_attempts, retry,
                    return_token_ids (default false: ask for the exact token ids, vLLM's and `harness serve`'s
                    extension; records then carry them as a local model's do)
    litellm:        api_base (alias base_url), api_key, supports_tools, context_window, timeout,
                    max_attempts, retry (a RetryPolicy)
    openai-compat and litellm: extra_params={...} sent with every request (the CLI's -M puts any key it does
                    not know here for these two backends: -M top_p=0.9 -M reasoning_effort=low)

Adding a backend: a module with a `from_spec(target, spec, options) -> Model` function, and one `register`
line below (its prefix, that function, the options it takes). A plugin's function (an entry point, or
py:MODULE:FUNCTION) needs no line here: it takes price_in, price_out and the -M options it lists in an
OPTIONS attribute of its own, if any (docs/extending.md).

Per attempt the agent loop calls `model_for_attempt(model, task_id, sample)` and uses what it returns:
the model itself for every backend except replay, which gives a fresh per-task script.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.models.base import Completion, Model, ModelError, ToolCall
from agent.models.options import ModelOptions
from agent.models.retry import ContextLengthError, RetryPolicy
from results import plugins
from results.errors import UserError

__all__ = [
    "Completion",
    "ContextLengthError",
    "Model",
    "ModelError",
    "RetryPolicy",
    "ToolCall",
    "DEFAULT_MODEL",
    "MODEL_OPTION_HELP",
    "add_model_option",
    "backend",
    "get_model",
    "model_for_attempt",
]

DEFAULT_MODEL = "local:smollm2-135m"
MODEL_OPTION_HELP = (
    "model option, repeatable: supports_tools=true, context_window=N, price_in=USD/1M, price_out=USD/1M, "
    "base_url=URL, api_key=KEY, timeout=S, adapter=DIR, device=cpu|cuda; for openai-compat and "
    "litellm models any other key is sent with each request (-M top_p=0.9)"
)

_COMMON = {"price_in", "price_out"}
_HTTP = {"api_key", "supports_tools", "context_window", "timeout", "max_attempts", "retry", "extra_params"}


@dataclass(frozen=True)
class Backend:
    name: str  # the spec's prefix ("local" in local:smollm2-135m)
    build: str  # "module:function" (target, spec, ModelOptions) -> Model, imported on first use
    options: frozenset[str]  # the options it takes (get_model's keywords, -M keys)
    extra_params: bool  # -M keys it does not know are sent with each request (the HTTP backends)


BACKENDS: dict[str, Backend] = {}  # in registration order
FALLBACK = "litellm"  # a spec with no registered prefix: LiteLLM's own names (openai/gpt-4o-mini)
BY_PATH = "py"  # py:MODULE:FUNCTION[:TARGET]: a backend named by its dotted path (a spec's first colon ends
# its backend's name, so the path cannot stand alone as a task.toml's kind or --sandbox's value does)


def register(name: str, build: str, options: set[str], *, extra_params: bool = False) -> None:
    """Adds a model backend: a module whose `build` function makes its Model. Adding one = its module and
    one line below."""
    if name in BACKENDS:
        raise ValueError(f"model backend {name!r} is registered twice")
    BACKENDS[name] = Backend(name, build, frozenset(_COMMON | options), extra_params)


register("local", "agent.models.local:from_spec", {"adapter", "seed", "device"})
register("replay", "agent.models.replay:from_spec", set())
register(
    "openai-compat",
    "agent.models.openai_compat:from_spec",
    _HTTP | {"base_url", "return_token_ids"},
    extra_params=True,
)
register(
    "litellm", "agent.models.litellm_model:from_spec", _HTTP | {"api_base", "base_url"}, extra_params=True
)


def resolve(spec: str) -> tuple[Backend, str]:
    """The backend a spec names and the target it is given: a registered prefix, py:MODULE:FUNCTION, an
    installed plugin's entry point, else LiteLLM with the whole spec."""
    prefix, colon, rest = spec.partition(":")
    if prefix in BACKENDS and prefix != FALLBACK:
        return BACKENDS[prefix], rest
    if colon and prefix == BY_PATH:
        module, _, rest = rest.partition(":")
        function, _, target = rest.partition(":")
        if not module or not function:
            raise UserError(f"model {spec}: write py:MODULE:FUNCTION[:TARGET], e.g. py:mypkg.echo:from_spec")
        return _plugin(f"{module}:{function}"), target
    if colon and (found := plugins.installed("models").get(prefix)):
        return _plugin(found, prefix), rest
    return BACKENDS[FALLBACK], spec


def backend(spec: str) -> Backend:
    """The backend a spec names (resolve)."""
    return resolve(spec)[0]


def _plugin(target: str, name: str = "") -> Backend:
    """A plugin's backend: its function's OPTIONS (besides price_in and price_out), no extra request keys."""
    build = plugins.load(target, f"model backend {name or target!r}")
    if not callable(build):
        raise UserError(f"model backend {name or target!r}: {target} is not a from_spec function")
    return Backend(name or target, target, frozenset(_COMMON | set(getattr(build, "OPTIONS", ()))), False)


def get_model(spec: str = DEFAULT_MODEL, **options: Any) -> Model:
    """A Model for the spec string (see the module docstring); raises UserError for a bad spec or option."""
    spec = (spec or "").strip()
    if not spec:
        raise UserError(f"no model given; e.g. --model {DEFAULT_MODEL}")
    backend, target = resolve(spec)
    options = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(options) - backend.options)
    if unknown:
        raise UserError(
            f"model {spec}: unknown option(s) {', '.join(unknown)} for the {backend.name} backend; "
            f"valid: {', '.join(sorted(backend.options)) or 'none'}"
        )
    build = plugins.load(backend.build, f"model backend {backend.name!r}")
    return build(target, spec, ModelOptions(options))


def add_model_option(parser: Any, help: str = MODEL_OPTION_HELP) -> None:
    """The repeatable -M/--model-option KEY=VALUE of `eval`, `run` and `serve` (parse_model_options
    reads the values)."""
    parser.add_argument(
        "-M",
        "--model-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="model_option",
        help=help,
    )


def parse_model_options(spec: str, pairs: list[str]) -> dict[str, Any]:
    """-M key=value pairs for get_model: known options by name; for the HTTP backends any other key is an
    extra request parameter (the value read as JSON when it parses: 0.9, true, {"a": 1}; else a string)."""
    import json

    backend = resolve(spec or DEFAULT_MODEL)[0]
    options: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(
                f"-M {pair}: write -M key=value (e.g. -M supports_tools=true -M context_window=32768)"
            )
        if key in backend.options and key not in ("retry", "extra_params"):
            options[key] = value
        elif backend.extra_params:
            try:
                extra[key] = json.loads(value)
            except ValueError:
                extra[key] = value
        else:
            known = ", ".join(sorted(backend.options - {"retry", "extra_params"}))
            raise UserError(f"-M {pair}: the {backend.name} backend has no option {key!r}; valid: {known}")
    if extra:
        options["extra_params"] = extra
    return options


def model_for_attempt(model: Model, task_id: str, sample: int = 0) -> Model:
    """The model to use for one attempt: a fresh per-task script for replay models, else the model itself."""
    for_task = getattr(model, "for_task", None)
    return for_task(task_id, sample) if callable(for_task) else model
