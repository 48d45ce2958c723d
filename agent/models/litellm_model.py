"""Hosted models through LiteLLM: openai/..., anthropic/..., gemini/..., openrouter/..., ollama/..., etc."""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from agent.models.base import Completion
from agent.models.common import apply_prices, completions_of, import_litellm, litellm_tokens, set_cost
from agent.models.options import ModelOptions
from agent.models.retry import RetryPolicy, call_with_retries
from results.errors import UserError

# Listed by litellm.validate_environment but not needed: these have working defaults.
_OPTIONAL_ENV = {"OLLAMA_API_BASE"}
DEFAULT_CONTEXT_WINDOW = 8192


class LiteLLMModel:
    def __init__(
        self,
        model: str,
        *,
        api_key: Optional[str] = None,
        api_base: Optional[str] = None,
        supports_tools: Optional[bool] = None,
        context_window: Optional[int] = None,
        retry: RetryPolicy = RetryPolicy(),
        price_in: Optional[float] = None,
        price_out: Optional[float] = None,
        extra_params: Optional[dict[str, Any]] = None,
    ) -> None:
        litellm = import_litellm()
        self.name = model
        self.retry = retry
        self.price_in, self.price_out = price_in, price_out
        self.extra_params = dict(extra_params or {})  # sent with every request (top_p, reasoning_effort, ...)
        try:
            _, self.provider, _, _ = litellm.get_llm_provider(model, api_base=api_base)
        except Exception:
            raise UserError(
                f"unknown model {model!r}: name the provider, e.g. openai/gpt-4o-mini, "
                "anthropic/claude-3-5-haiku-latest, "
                "gemini/gemini-2.0-flash, openrouter/<org>/<model>, ollama/<model>; or local:smollm2-135m, "
                "openai-compat:http://HOST:PORT/v1/MODEL, replay:FILE"
            ) from None
        self.api_base = api_base
        if api_key is None:
            missing = self._missing_keys(litellm)
            if missing and api_base:
                api_key = (
                    "none"  # a self-hosted endpoint (api_base) usually needs no key, but clients want one
                )
            elif missing:
                raise UserError(
                    f"model {model!r}: the API key is not set; export {' or '.join(missing)} "
                    "(or pass api_key=...)"
                )
        self.api_key = api_key
        self.supports_tools = supports_tools if supports_tools is not None else self._probe_tools(litellm)
        self.context_window = context_window or self._probe_context(litellm)

    def _missing_keys(self, litellm: Any) -> list[str]:
        try:
            env = litellm.validate_environment(self.name, api_base=self.api_base)
        except Exception:
            return []
        return [k for k in env.get("missing_keys") or [] if k not in _OPTIONAL_ENV]

    def _probe_tools(self, litellm: Any) -> bool:
        try:
            return bool(litellm.supports_function_calling(self.name))
        except Exception:
            return False

    def _probe_context(self, litellm: Any) -> int:
        try:
            info = litellm.get_model_info(self.name)
            return int(info.get("max_input_tokens") or info.get("max_tokens") or DEFAULT_CONTEXT_WINDOW)
        except Exception:
            return DEFAULT_CONTEXT_WINDOW

    def _cost(self, response: Any) -> float:
        """USD from litellm's price map; 0.0 for a self-hosted api_base or a model the map lacks."""
        if self.api_base:
            return 0.0
        litellm = import_litellm()
        for model in (None, self.name):  # the name the provider answered with, then the one we asked for
            try:
                return float(litellm.completion_cost(completion_response=response, model=model) or 0.0)
            except Exception:
                continue
        return 0.0

    async def _one(
        self,
        messages: list[dict[str, Any]],
        tools: Optional[list[dict[str, Any]]],
        temperature: float,
        max_tokens: int,
        seed: Optional[int],
    ) -> list[Completion]:
        litellm = import_litellm()
        kwargs: dict[str, Any] = dict(
            model=self.name,
            messages=messages,
            temperature=temperature,
            max_tokens=max_tokens,
            num_retries=0,
            timeout=self.retry.timeout,
            drop_params=True,
        )  # e.g. no temperature/seed for some models
        kwargs.update(self.extra_params)
        if seed is not None:
            kwargs["seed"] = seed
        if tools and self.supports_tools:
            kwargs["tools"] = tools
        if self.api_key is not None:
            kwargs["api_key"] = self.api_key
        if self.api_base:
            kwargs["api_base"] = self.api_base
        where = self.api_base or self.provider
        response = await call_with_retries(
            lambda: litellm.acompletion(**kwargs),
            what=f"model {self.name!r} via {where}",
            policy=self.retry,
            auth_hint=f"check {self.provider.upper()}_API_KEY",
        )
        out = completions_of(response)
        set_cost(out, self._cost(response))
        apply_prices(out, self.price_in, self.price_out)
        return out

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: Optional[list[dict[str, Any]]] = None,
        n: int = 1,
        temperature: float = 0.0,
        max_tokens: int = 512,
        seed: Optional[int] = None,
    ) -> list[Completion]:
        # n separate requests: not every provider accepts n, and each sample then has its own retries.
        # With a seed, request i gets seed + i: the same seed n times would give n identical samples.
        batches = await asyncio.gather(
            *[
                self._one(messages, tools, temperature, max_tokens, None if seed is None else seed + i)
                for i in range(n)
            ]
        )
        return [c for batch in batches for c in batch[:1]]

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return litellm_tokens(self.name, messages)


def from_spec(target: str, spec: str, o: ModelOptions) -> LiteLLMModel:
    """Any spec no other backend claims: LiteLLM's names (registered in agent/models/__init__.py)."""
    return LiteLLMModel(
        spec,
        api_key=o.get("api_key"),
        api_base=o.get("api_base") or o.get("base_url"),
        supports_tools=o.bool("supports_tools"),
        context_window=o.int("context_window"),
        retry=o.retry(),
        extra_params=o.get("extra_params"),
        **o.prices(),
    )
