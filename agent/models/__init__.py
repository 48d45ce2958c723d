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

Per attempt the agent loop calls `model_for_attempt(model, task_id, sample)` and uses what it returns:
the model itself for every backend except replay, which gives a fresh per-task script.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from agent.models.base import Completion, Model, ModelError, ToolCall
from agent.models.retry import ContextLengthError, RetryPolicy
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
_ALLOWED = {
    "local": _COMMON | {"adapter", "seed", "device"},
    "openai-compat": _COMMON | _HTTP | {"base_url", "return_token_ids"},
    "replay": _COMMON,
    "litellm": _COMMON | _HTTP | {"api_base", "base_url"},
}


def _float(options: dict[str, Any], key: str) -> Optional[float]:
    value = options.get(key)
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise UserError(f"model option {key}={value!r}: expected a number") from None


def _int(options: dict[str, Any], key: str) -> Optional[int]:
    value = _float(options, key)
    return None if value is None else int(value)


def _bool(options: dict[str, Any], key: str) -> Optional[bool]:
    value = options.get(key)
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise UserError(f"model option {key}={value!r}: expected true or false")


def _retry(options: dict[str, Any]) -> RetryPolicy:
    policy = options.get("retry") or RetryPolicy()
    if not isinstance(policy, RetryPolicy):
        raise UserError("model option retry: expected a RetryPolicy")
    if options.get("timeout") is not None:
        policy = replace(policy, timeout=_float(options, "timeout"))
    if options.get("max_attempts") is not None:
        policy = replace(policy, max_attempts=max(1, _int(options, "max_attempts") or 1))
    return policy


def backend_of(spec: str) -> str:
    prefix = spec.split(":", 1)[0]
    return prefix if prefix in ("local", "openai-compat", "replay") else "litellm"


def get_model(spec: str = DEFAULT_MODEL, **options: Any) -> Model:
    """A Model for the spec string (see the module docstring); raises UserError for a bad spec or option."""
    spec = (spec or "").strip()
    if not spec:
        raise UserError(f"no model given; e.g. --model {DEFAULT_MODEL}")
    backend = backend_of(spec)
    options = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(options) - _ALLOWED[backend])
    if unknown:
        raise UserError(
            f"model {spec}: unknown option(s) {', '.join(unknown)} for the {backend} backend; "
            f"valid: {', '.join(sorted(_ALLOWED[backend])) or 'none'}"
        )
    price_in, price_out = _float(options, "price_in"), _float(options, "price_out")
    target = spec.split(":", 1)[1] if backend != "litellm" else spec

    if backend == "local":
        from agent.models.local import LocalModel

        return LocalModel(
            target,
            adapter=options.get("adapter"),
            seed=_int(options, "seed"),
            device=options.get("device"),
            name=spec,
            price_in=price_in,
            price_out=price_out,
        )
    if backend == "replay":
        from agent.models.replay import ReplayModel

        if not target:
            raise UserError(
                "replay: name the file, e.g. replay:replies.json or replay:results/run/attempts.jsonl"
            )
        return ReplayModel.from_file(target, name=spec, price_in=price_in, price_out=price_out)
    if backend == "openai-compat":
        from agent.models.openai_compat import OpenAICompatModel, parse_target

        base_url, model_name = parse_target(target, options.get("base_url"))
        return OpenAICompatModel(
            model_name,
            base_url,
            name=spec,
            api_key=options.get("api_key"),
            supports_tools=bool(_bool(options, "supports_tools")),
            context_window=_int(options, "context_window") or 8192,
            retry=_retry(options),
            price_in=price_in,
            price_out=price_out,
            extra_params=options.get("extra_params"),
            return_token_ids=bool(_bool(options, "return_token_ids")),
        )
    from agent.models.litellm_model import LiteLLMModel

    return LiteLLMModel(
        spec,
        api_key=options.get("api_key"),
        api_base=options.get("api_base") or options.get("base_url"),
        supports_tools=_bool(options, "supports_tools"),
        context_window=_int(options, "context_window"),
        retry=_retry(options),
        price_in=price_in,
        price_out=price_out,
        extra_params=options.get("extra_params"),
    )


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

    backend = backend_of(spec or DEFAULT_MODEL)
    options: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(
                f"-M {pair}: write -M key=value (e.g. -M supports_tools=true -M context_window=32768)"
            )
        if key in _ALLOWED[backend] and key not in ("retry", "extra_params"):
            options[key] = value
        elif backend in ("openai-compat", "litellm"):
            try:
                extra[key] = json.loads(value)
            except ValueError:
                extra[key] = value
        else:
            known = ", ".join(sorted(_ALLOWED[backend] - {"retry", "extra_params"}))
            raise UserError(f"-M {pair}: the {backend} backend has no option {key!r}; valid: {known}")
    if extra:
        options["extra_params"] = extra
    return options


def model_for_attempt(model: Model, task_id: str, sample: int = 0) -> Model:
    """The model to use for one attempt: a fresh per-task script for replay models, else the model itself."""
    for_task = getattr(model, "for_task", None)
    return for_task(task_id, sample) if callable(for_task) else model
