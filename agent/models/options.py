"""The values of a model's options (`-M key=value`, or get_model's keywords), read as a backend needs them.

Values may be strings (from the command line) or already typed; a value that does not read is a UserError
naming the option.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from agent.models.retry import RetryPolicy
from results.errors import UserError


class ModelOptions:
    def __init__(self, values: dict[str, Any]):
        self.values = {k: v for k, v in values.items() if v is not None}

    def get(self, key: str) -> Any:
        return self.values.get(key)

    def float(self, key: str) -> Optional[float]:
        value = self.values.get(key)
        if value is None:
            return None
        try:
            return float(value)
        except (TypeError, ValueError):
            raise UserError(f"model option {key}={value!r}: expected a number") from None

    def int(self, key: str) -> Optional[int]:
        value = self.float(key)
        return None if value is None else int(value)

    def bool(self, key: str) -> Optional[bool]:
        value = self.values.get(key)
        if value is None or isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise UserError(f"model option {key}={value!r}: expected true or false")

    def prices(self) -> dict[str, Optional[float]]:
        """price_in and price_out (USD per 1M tokens), which every backend takes."""
        return {"price_in": self.float("price_in"), "price_out": self.float("price_out")}

    def retry(self) -> RetryPolicy:
        policy = self.values.get("retry") or RetryPolicy()
        if not isinstance(policy, RetryPolicy):
            raise UserError("model option retry: expected a RetryPolicy")
        if self.values.get("timeout") is not None:
            policy = replace(policy, timeout=self.float("timeout"))
        if self.values.get("max_attempts") is not None:
            policy = replace(policy, max_attempts=max(1, self.int("max_attempts") or 1))
        return policy
