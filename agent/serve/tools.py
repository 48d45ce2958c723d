"""Chat rendering for `harness serve` on local models: tools, tool_choice and response_format in the
prompt, and the model's tool calls parsed back out of its reply.

Tool-call syntax is the Hermes convention (Qwen2.5/3, Hermes, SmolLM3 and others use it):

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

- A chat template that renders `tools` itself and speaks that syntax (it contains "<tool_call>") gets the
  request's tools and messages as they are (`apply_chat_template(..., tools=...)`, arguments as dicts).
- Any other template gets the documented fallback: the tool schemas and the syntax above in a system
  message (FALLBACK_TOOLS_PROMPT), earlier assistant tool calls written as <tool_call> blocks, and tool
  results as user turns wrapped in <tool_response>...</tool_response>.

tool_choice: "none" renders no tools; "auto" lets the model choose; a named function starts the reply
with `<tool_call>` and that function's name, so the model only writes the arguments; "required" does the
same with the function the model scores most likely (agent/serve/choices.py choose_tool). parallel_tool_calls
false ends the reply at the first `</tool_call>`.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

from agent.models.common import message_text

OPEN, CLOSE = "<tool_call>", "</tool_call>"

FALLBACK_TOOLS_PROMPT = """You can call functions. Their JSON schemas:
<tools>
{tools}
</tools>
To call a function, reply with one block per call, each a JSON object with the function's name and arguments:
<tool_call>
{{"name": "function_name", "arguments": {{"argument_name": "value"}}}}
</tool_call>"""

JSON_PROMPT = "Reply with only a JSON object, no other text."
SCHEMA_PROMPT = "Reply with only a JSON object that matches this JSON schema, no other text:\n{schema}"


class RequestError(ValueError):
    """A malformed field in the request: the message names it."""

    def __init__(self, message: str, param: Optional[str] = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass
class ToolSpec:
    """The request's tools after validation."""

    tools: list[dict[str, Any]]  # OpenAI format, [{"type": "function", "function": {...}}]
    choice: str = "auto"  # auto | none | required | function
    function: Optional[str] = None  # the named function when choice == "function"
    parallel: bool = True
    names: list[str] = field(default_factory=list)


def parse_tools(body: dict[str, Any]) -> Optional[ToolSpec]:
    tools = body.get("tools")
    if tools is None or tools == []:
        if body.get("tool_choice") not in (None, "none", "auto"):
            raise RequestError("'tool_choice' needs 'tools'", "tool_choice")
        return None
    if not isinstance(tools, list):
        raise RequestError(
            "'tools' must be a list of {type: 'function', function: {name, parameters}}", "tools"
        )
    names = []
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if (
            not isinstance(t, dict)
            or t.get("type", "function") != "function"
            or not isinstance(fn, dict)
            or not isinstance(fn.get("name"), str)
            or not fn["name"]
        ):
            raise RequestError(
                f"tools[{i}] must be {{type: 'function', function: {{name, parameters}}}}", f"tools[{i}]"
            )
        if not isinstance(fn.get("parameters", {}), dict):
            raise RequestError(f"tools[{i}].function.parameters must be a JSON schema object", f"tools[{i}]")
        names.append(fn["name"])
    choice = body.get("tool_choice", "auto")
    spec = ToolSpec(tools=tools, names=names, parallel=body.get("parallel_tool_calls", True) is not False)
    if choice is None or choice in ("auto", "none", "required"):
        spec.choice = choice or "auto"
    elif (
        isinstance(choice, dict)
        and isinstance(choice.get("function"), dict)
        and isinstance(choice["function"].get("name"), str)
    ):
        if choice["function"]["name"] not in names:
            raise RequestError(
                f"tool_choice names {choice['function']['name']!r}, which is not in 'tools'", "tool_choice"
            )
        spec.choice, spec.function = "function", choice["function"]["name"]
    else:
        raise RequestError(
            "'tool_choice' must be 'none', 'auto', 'required' or {type: 'function', function: {name}}",
            "tool_choice",
        )
    return spec


@dataclass
class ResponseFormat:
    kind: str  # json_object | json_schema
    schema: Optional[dict[str, Any]] = None
    name: str = ""


def parse_response_format(body: dict[str, Any]) -> Optional[ResponseFormat]:
    rf = body.get("response_format")
    if rf is None:
        return None
    if not isinstance(rf, dict) or rf.get("type") not in ("text", "json_object", "json_schema"):
        raise RequestError(
            "'response_format' must be {type: 'text' | 'json_object' | 'json_schema', ...}", "response_format"
        )
    if rf["type"] == "text":
        return None
    if rf["type"] == "json_object":
        return ResponseFormat("json_object")
    js = rf.get("json_schema")
    if not isinstance(js, dict) or not isinstance(js.get("schema", {}), dict):
        raise RequestError("response_format json_schema needs {name, schema}", "response_format")
    schema = js.get("schema") or {}
    try:
        import jsonschema

        jsonschema.validators.validator_for(schema).check_schema(schema)
    except ImportError:
        pass
    except Exception as e:
        raise RequestError(
            f"response_format json_schema: not a valid JSON schema: {str(e).splitlines()[0]}",
            "response_format",
        ) from None
    return ResponseFormat("json_schema", schema, str(js.get("name") or ""))


def native_tools(tokenizer: Any) -> bool:
    """Whether the model's own chat template renders tools in the syntax parse_tool_calls reads."""
    template = getattr(tokenizer, "chat_template", None) or ""
    return isinstance(template, str) and "tools" in template and OPEN in template


def _arguments_dict(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw if raw is not None else {}


def _call_block(name: str, arguments: Any) -> str:
    return f"{OPEN}\n{json.dumps({'name': name, 'arguments': _arguments_dict(arguments)})}\n{CLOSE}"


def render_messages(
    messages: list[dict[str, Any]], tools: Optional[ToolSpec], fmt: Optional[ResponseFormat], native: bool
) -> tuple[list[dict[str, Any]], Optional[list[dict[str, Any]]]]:
    """(messages for apply_chat_template, tools to pass it). Native templates get structured tool calls;
    the fallback writes tools, calls and results as text."""
    offered = tools if tools is not None and tools.choice != "none" else None
    out: list[dict[str, Any]] = []
    for m in messages:
        role = "system" if m["role"] == "developer" else m["role"]
        text = message_text(m)
        calls = m.get("tool_calls") or []
        if role == "assistant" and calls:
            if native:
                out.append(
                    {
                        "role": "assistant",
                        "content": text,
                        "tool_calls": [
                            {
                                "type": "function",
                                "function": {
                                    "name": c.get("function", {}).get("name", ""),
                                    "arguments": _arguments_dict(c.get("function", {}).get("arguments")),
                                },
                            }
                            for c in calls
                            if isinstance(c, dict)
                        ],
                    }
                )
            else:
                blocks = [
                    _call_block(c.get("function", {}).get("name", ""), c.get("function", {}).get("arguments"))
                    for c in calls
                    if isinstance(c, dict)
                ]
                out.append({"role": "assistant", "content": "\n".join(([text] if text else []) + blocks)})
        elif role in ("tool", "function"):
            if native:
                out.append({"role": "tool", "content": text})
            else:
                out.append({"role": "user", "content": f"<tool_response>\n{text}\n</tool_response>"})
        else:
            out.append({"role": role, "content": text})
    extra = []
    if offered is not None and not native:
        extra.append(FALLBACK_TOOLS_PROMPT.format(tools="\n".join(json.dumps(t) for t in offered.tools)))
    if offered is not None and offered.choice == "required":
        extra.append("You must call at least one function.")
    if offered is not None and offered.choice == "function":
        extra.append(f"You must call the function {offered.function}.")
    if fmt is not None:
        extra.append(SCHEMA_PROMPT.format(schema=json.dumps(fmt.schema)) if fmt.schema else JSON_PROMPT)
    if extra:
        note = "\n\n".join(extra)
        if out and out[0]["role"] == "system":
            out[0] = dict(out[0], content=f"{out[0]['content']}\n\n{note}")
        else:
            out.insert(0, {"role": "system", "content": note})
    return out, (offered.tools if offered is not None and native else None)


def reply_prefix(tools: Optional[ToolSpec], fmt: Optional[ResponseFormat]) -> str:
    """Text the reply is made to start with (appended to the prompt; part of the returned content)."""
    if tools is not None and tools.choice == "function":
        return f'{OPEN}\n{{"name": {json.dumps(tools.function)}, "arguments": {{'
    if tools is not None and tools.choice == "required" and len(tools.names) == 1:  # the one tool: named
        return f'{OPEN}\n{{"name": {json.dumps(tools.names[0])}, "arguments": {{'
    if tools is not None and tools.choice == "required":
        return f'{OPEN}\n{{"name": "'
    if fmt is not None:
        return "{"
    return ""


def tool_stops(tools: Optional[ToolSpec]) -> list[str]:
    """Extra stop strings: one call only when parallel calls are off."""
    return [CLOSE] if tools is not None and tools.choice != "none" and not tools.parallel else []


_CALL = re.compile(re.escape(OPEN) + r"\s*(.*?)\s*(?:" + re.escape(CLOSE) + r"|$)", re.DOTALL)


def _json_object(text: str) -> Optional[dict[str, Any]]:
    start = text.find("{")
    if start < 0:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def parse_tool_calls(text: str, tools: ToolSpec) -> tuple[Optional[str], list[dict[str, Any]]]:
    """(content before the first call, OpenAI tool_calls) from a reply; no calls when none parses to a
    known function. Arguments are returned as a JSON string, as the API does."""
    if tools.choice == "none" or OPEN not in text:
        return text, []
    calls = []
    for body in _CALL.findall(text):
        obj = _json_object(body)
        if not obj or obj.get("name") not in tools.names:
            continue
        args = obj.get("arguments", obj.get("parameters", {}))
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {
                    "name": obj["name"],
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
        )
        if not tools.parallel:
            break
    forced = tools.function or (
        tools.names[0] if tools.choice == "required" and len(tools.names) == 1 else None
    )
    if not calls and forced:  # the reply was made to start this call: it is one, even if its JSON is not
        raw = text[text.find(OPEN) + len(OPEN) :]
        raw = raw[: raw.find(CLOSE)] if CLOSE in raw else raw
        start = raw.find('"arguments":')
        args = raw[start + len('"arguments":') :].strip() if start >= 0 else "{}"
        args = args[:-1].rstrip() if args.endswith("}") and args.count("}") > args.count("{") else args
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": forced, "arguments": args},
            }
        )
    if not calls:
        return text, []
    content = text[: text.find(OPEN)].strip()
    return content or None, calls
