"""Any OpenAI-compatible chat endpoint (vLLM, llama.cpp server, Ollama, `harness serve`) via the
official client."""

from __future__ import annotations

import asyncio
import os
from typing import Any, Optional

from agent.models.base import Completion, ModelError
from agent.models.common import apply_prices, completions_of, litellm_tokens
from agent.models.options import ModelOptions
from agent.models.retry import RetryPolicy, call_with_retries
from results.errors import UserError


def parse_target(target: str, base_url: Optional[str] = None) -> tuple[str, str]:
    """(base_url, model) from the part after "openai-compat:".

    "http://host:8000/v1/MODEL" -> ("http://host:8000/v1", "MODEL"); MODEL may contain slashes
    ("http://host:8000/v1/meta-llama/Llama-3.1-8B"). With the base_url option, the target is just MODEL.
    """
    target = target.strip()
    if target.startswith(("http://", "https://")):
        scheme, _, rest = target.partition("://")
        host, slash, path = rest.partition("/")
        path = slash + path
        if "/v1/" not in path:
            raise UserError(
                f"openai-compat:{target}: cannot tell the base URL from the model name; write "
                "openai-compat:http://HOST:PORT/v1/MODEL, or openai-compat:MODEL with the base_url option"
            )
        prefix, _, model = path.partition("/v1/")
        return f"{scheme}://{host}{prefix}/v1", model.strip("/")
    if not base_url:
        raise UserError(
            f"openai-compat:{target}: no server given; "
            f"write openai-compat:http://HOST:PORT/v1/{target or 'MODEL'} "
            "or pass base_url=http://HOST:PORT/v1"
        )
    return base_url.rstrip("/"), target


def with_token_ids(completions: list[Completion], response: Any) -> list[Completion]:
    """Fills prompt_ids / completion_ids from a `return_token_ids` response: `prompt_token_ids` on the
    response and `token_ids` on each choice (fields the client keeps as extras). Absent: left None."""
    prompt = (getattr(response, "model_extra", None) or {}).get("prompt_token_ids")
    for c, choice in zip(completions, response.choices or []):
        ids = (getattr(choice, "model_extra", None) or {}).get("token_ids")
        if prompt is not None and ids is not None:
            c.prompt_ids, c.completion_ids = list(prompt), list(ids)
    return completions


class OpenAICompatModel:
    """Chat completions against base_url with the official `openai` AsyncOpenAI client (its retries off)."""

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        name: Optional[str] = None,
        api_key: Optional[str] = None,
        supports_tools: bool = False,
        context_window: int = 8192,
        retry: RetryPolicy = RetryPolicy(),
        price_in: Optional[float] = None,
        price_out: Optional[float] = None,
        extra_params: Optional[dict[str, Any]] = None,
        return_token_ids: bool = False,
    ) -> None:
        if not model:
            raise UserError(
                f"openai-compat: no model name given for {base_url}; write openai-compat:{base_url}/MODEL"
            )
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.name = name or f"openai-compat:{self.base_url}/{model}"
        # Local servers ignore the key, but the client insists on one.
        self.api_key = api_key or os.environ.get("OPENAI_COMPAT_API_KEY") or "none"
        self.supports_tools = supports_tools
        self.context_window = context_window
        self.retry = retry
        self.price_in, self.price_out = price_in, price_out
        self.extra_params = dict(extra_params or {})  # sent with every request (top_p, top_k, ...)
        if return_token_ids:  # vLLM's extension, also `harness serve`'s: exact ids for token-level training
            self.extra_params["return_token_ids"] = True
        self._client: Any = None
        self._client_loop: Any = None

    def _get_client(self) -> Any:
        # An httpx client belongs to the event loop it was first used on; make one per loop.
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            from openai import AsyncOpenAI

            self._client = AsyncOpenAI(
                base_url=self.base_url, api_key=self.api_key, max_retries=0, timeout=self.retry.timeout
            )
            self._client_loop = loop
        return self._client

    async def _request(
        self,
        messages: list[dict[str, Any]],
        tools: Optional[list[dict[str, Any]]],
        n: int,
        temperature: float,
        max_tokens: int,
        seed: Optional[int],
    ) -> list[Completion]:
        client = self._get_client()
        kwargs: dict[str, Any] = dict(
            model=self.model, messages=messages, temperature=temperature, max_tokens=max_tokens
        )
        if self.extra_params:  # the client sends extra_body's keys as top-level request fields
            kwargs["extra_body"] = dict(self.extra_params)
        if n != 1:
            kwargs["n"] = n
        if seed is not None:
            kwargs["seed"] = seed
        if tools and self.supports_tools:
            kwargs["tools"] = tools
        response = await call_with_retries(
            lambda: client.chat.completions.create(**kwargs),
            what=f"model {self.model!r} at {self.base_url}",
            policy=self.retry,
            auth_hint="check the api_key option or OPENAI_COMPAT_API_KEY",
        )
        return with_token_ids(completions_of(response), response)

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: Optional[list[dict[str, Any]]] = None,
        n: int = 1,
        temperature: float = 0.0,
        max_tokens: int = 512,
        seed: Optional[int] = None,
    ) -> list[Completion]:
        out = await self._request(messages, tools, n, temperature, max_tokens, seed)
        if not out:
            raise ModelError(f"model {self.model!r} at {self.base_url}: the response had no choices")
        # Some servers (Ollama, llama.cpp) ignore n: make up the rest with single requests.
        missing = n - len(out)
        if missing > 0:
            extra = await asyncio.gather(
                *[self._request(messages, tools, 1, temperature, max_tokens, None) for _ in range(missing)]
            )
            out += [c for batch in extra for c in batch]
        out = out[:n]
        apply_prices(out, self.price_in, self.price_out)
        return out

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return litellm_tokens(self.model, messages)


def from_spec(target: str, spec: str, o: ModelOptions) -> OpenAICompatModel:
    """openai-compat:[http://HOST:PORT/v1/]MODEL (registered in agent/models/__init__.py)."""
    base_url, model_name = parse_target(target, o.get("base_url"))
    return OpenAICompatModel(
        model_name,
        base_url,
        name=spec,
        api_key=o.get("api_key"),
        supports_tools=bool(o.bool("supports_tools")),
        context_window=o.int("context_window") or 8192,
        retry=o.retry(),
        extra_params=o.get("extra_params"),
        return_token_ids=bool(o.bool("return_token_ids")),
        **o.prices(),
    )
