"""The values of a Harbor task.toml, one field at a time: each checked (a wrong one raises UserError naming
it), the fields this harness cannot honour refused (GPUs, TPUs, MCP servers, network allowlists, non-Linux),
and the [[steps]], artifacts and [environment.healthcheck] tables read into their specs."""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Optional

from results.errors import UserError
from tasks.harbor_spec import HEALTHCHECK_KEYS, NETWORK_MODES, Healthcheck, StepSpec

# ---------------------------------------------------------------------------------------------- refusals


def _refuse_unsupported(t: dict, loc: str, label: str) -> None:
    if t.get("gpus"):
        raise UserError(
            f"{loc}: {label} gpus = {_show(t['gpus'])}: this harness cannot give a task GPUs "
            "(run it under Harbor on a GPU machine, or set gpus = 0)"
        )
    if t.get("gpu_types"):
        raise UserError(f"{loc}: {label} gpu_types: this harness cannot give a task GPUs (remove it)")
    if t.get("tpu"):
        raise UserError(f"{loc}: {label} tpu: this harness cannot give a task TPUs (remove it)")
    if t.get("mcp_servers"):
        raise UserError(
            f"{loc}: {label} mcp_servers: MCP servers are not supported by this harness's agent "
            "(remove them, or run the task under Harbor)"
        )
    os_name = t.get("os", "linux")
    if not isinstance(os_name, str) or os_name.lower() != "linux":
        raise UserError(f"{loc}: {label} os = {_show(os_name)}: only linux tasks run here")


def _network(t: dict, loc: str, label: str) -> Optional[bool]:
    """True / False for public / no network; None when the table says nothing."""
    mode = t.get("network_mode")
    if mode is not None and mode not in NETWORK_MODES:
        raise UserError(
            f"{loc}: {label} network_mode must be one of {', '.join(NETWORK_MODES)} (got {_show(mode)})"
        )
    if mode == "allowlist" or t.get("allowed_hosts"):
        raise UserError(
            f'{loc}: {label} network_mode = "allowlist" / allowed_hosts: this harness cannot limit '
            'a container to some hosts (use "no-network" or "public")'
        )
    allow = t.get("allow_internet")
    if allow is not None and not isinstance(allow, bool):
        raise UserError(f"{loc}: {label} allow_internet must be true or false (got {_show(allow)})")
    if mode is not None:
        return mode == "public"
    return allow


# ---------------------------------------------------------------------------------------------- tables


def _steps(
    value: Any, files: dict[str, bytes], loc: str, where: Callable[[str], str]
) -> tuple[StepSpec, ...]:
    if not value:
        return ()
    if not isinstance(value, list) or not all(isinstance(st, dict) for st in value):
        raise UserError(f'{loc}: steps must be [[steps]] tables with name = "..."')

    def under(prefix: str) -> dict[str, bytes]:
        return {p[len(prefix) :]: d for p, d in files.items() if p.startswith(prefix)}

    out, seen = [], set()
    for st in value:
        name = st.get("name")
        label = f"[[steps]] {name}"
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or name in seen:
            raise UserError(
                f"{loc}: [[steps]] name must be a unique folder name under steps/ (got {_show(name)})"
            )
        seen.add(name)
        agent_t = st.get("agent") or {}
        ver_t = st.get("verifier") or {}
        if not isinstance(agent_t, dict) or not isinstance(ver_t, dict):
            raise UserError(f"{loc}: {label}: agent and verifier must be tables")
        if ver_t.get("environment_mode") == "separate" or "environment" in ver_t:
            raise UserError(f"{loc}: {label}: a step's own separate verifier environment is not supported")
        text = files.get(f"steps/{name}/instruction.md")
        if not text or not text.strip():
            raise UserError(f"{where(f'steps/{name}/instruction.md')}: missing (the step's instruction)")
        tests = {**under("tests/"), **under(f"steps/{name}/tests/")}
        if "test.sh" not in tests:
            raise UserError(f"{where(f'steps/{name}/tests/test.sh')}: missing (nor is there a tests/test.sh)")
        solution = under(f"steps/{name}/solution/") or under("solution/")
        min_reward = st.get("min_reward")
        if isinstance(min_reward, dict):
            min_reward = min_reward.get("reward")
        out.append(
            StepSpec(
                name=name,
                instruction=text.decode("utf-8", "replace"),
                test_files=tuple(sorted(tests.items())),
                solution_files=tuple(sorted(solution.items())),
                workdir_files=tuple(sorted(under(f"steps/{name}/workdir/").items())),
                agent_timeout_sec=_num(agent_t, "timeout_sec", 0.0, loc, label, zero=True) or None,
                agent_user=_user(agent_t, loc, label),
                verifier_timeout_sec=_num(ver_t, "timeout_sec", 0.0, loc, label, zero=True) or None,
                verifier_user=_user(ver_t, loc, label),
                verifier_env=_env(ver_t, "env", loc, label),
                min_reward=float(min_reward) if isinstance(min_reward, (int, float)) else None,
                artifacts=_artifacts(st.get("artifacts", []), loc, f"{label} artifacts"),
            )
        )
    return tuple(out)


def _artifacts(value: Any, loc: str, label: str) -> tuple[str, ...]:
    """artifacts = ["/path", { source = "/path", destination = "...", exclude = [...] }]: the sources,
    collected from the agent's container (destination and exclude are not applied: kept under the source's
    own path, whole)."""
    if not isinstance(value, list):
        raise UserError(f'{loc}: {label} must be a list of paths or {{ source = "/path" }} tables')
    out = []
    for a in value:
        if isinstance(a, dict):
            if a.get("service") not in (None, "main"):
                raise UserError(
                    f"{loc}: {label} service = {_show(a.get('service'))}: compose services are not supported "
                    "(collect from the main container only)"
                )
            a = a.get("source")
        if not isinstance(a, str) or not a.strip() or ".." in a.split("/"):
            raise UserError(f'{loc}: {label} entries need a source path without ".." (got {_show(a)})')
        out.append(a)
    return tuple(out)


def _healthcheck(env_t: dict, loc: str, unknown: list[str]) -> Optional[Healthcheck]:
    hc = env_t.get("healthcheck")
    if hc is None:
        return None
    if not isinstance(hc, dict) or not isinstance(hc.get("command"), str) or not hc["command"].strip():
        raise UserError(
            f'{loc}: [environment.healthcheck] needs command = "..." (a shell command, exit 0 = healthy)'
        )
    unknown.extend(f"environment.healthcheck.{k}" for k in hc if k not in HEALTHCHECK_KEYS)
    d = Healthcheck(command="")
    label = "[environment.healthcheck]"
    return Healthcheck(
        command=hc["command"],
        interval_sec=_num(hc, "interval_sec", d.interval_sec, loc, label, zero=True),
        timeout_sec=_num(hc, "timeout_sec", d.timeout_sec, loc, label),
        start_period_sec=_num(hc, "start_period_sec", d.start_period_sec, loc, label, zero=True),
        start_interval_sec=_num(hc, "start_interval_sec", d.start_interval_sec, loc, label, zero=True),
        retries=int(_num(hc, "retries", d.retries, loc, label)),
    )


# ---------------------------------------------------------------------------------------------- small helpers


def _str(t: dict, key: str, default, loc: str, label: str):
    value = t.get(key, default)
    if value is not default and not isinstance(value, str):
        raise UserError(f"{loc}: {label} {key} must be a string (got {_show(value)})")
    return value


def _list(t: dict, key: str, loc: str, label: str) -> list:
    value = t.get(key, [])
    if not isinstance(value, list):
        raise UserError(f"{loc}: {label} {key} must be a list (got {_show(value)})")
    return value


def _strings(t: dict, key: str, loc: str, label: str) -> list[str]:
    value = _list(t, key, loc, label)
    if not all(isinstance(v, str) for v in value):
        raise UserError(f"{loc}: {label} {key} must be a list of strings (got {_show(value)})")
    return value


def _num(t: dict, key: str, default: float, loc: str, label: str, zero: bool = False) -> float:
    value = t.get(key, default)
    ok = (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value > 0 or (zero and value == 0))
    )
    if not ok:
        raise UserError(
            f"{loc}: {label} {key} must be a {'number >= 0' if zero else 'positive number'} "
            f"(got {_show(value)})"
        )
    return float(value)


def _env(t: dict, key: str, loc: str, label: str) -> tuple[tuple[str, str], ...]:
    value = t.get(key, {})
    if not isinstance(value, dict):
        raise UserError(f'{loc}: {label} {key} must be a table of NAME = "value" (got {_show(value)})')
    out = []
    for k, v in value.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise UserError(f"{loc}: {label} {key}.{k}: not a valid environment variable name")
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise UserError(f"{loc}: {label} {key}.{k} must be a string (got {_show(v)})")
        out.append((k, str(v)))
    return tuple(out)


def _user(t: dict, loc: str, label: str) -> Optional[str]:
    value = t.get("user")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)) or (isinstance(value, int) and value < 0):
        raise UserError(f"{loc}: {label} user must be a user name or a uid (got {_show(value)})")
    text = str(value)
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?", text):
        raise UserError(f"{loc}: {label} user must be a user name or a uid (got {_show(value)})")
    return text


def _toml_text(v: Any) -> str:
    return v if isinstance(v, str) else _show(v)


def _show(value: Any) -> str:
    import json

    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)
