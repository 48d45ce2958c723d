"""The tool-call and response_format rules of `harness serve` (agent/serve/tools.py) on literal replies."""

import json

import pytest

from agent.serve.tools import (
    FALLBACK_TOOLS_PROMPT,
    RequestError,
    parse_response_format,
    parse_tool_calls,
    parse_tools,
    render_messages,
    reply_prefix,
    tool_stops,
)
from tests.helpers import tool_turn

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]
TWO = (
    'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_time", "arguments": {"city": "Tokyo"}}\n</tool_call>'
)


def spec(**body):
    return parse_tools({"tools": TOOLS, **body})


def test_calls_are_parsed_with_the_text_before_them():
    content, calls = parse_tool_calls(TWO, spec())
    assert content == "Let me check."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {"city": "Tokyo"}),
    ]
    assert all(c["type"] == "function" and c["id"].startswith("call_") for c in calls)
    assert len({c["id"] for c in calls}) == 2


def test_parallel_calls_off_keeps_one_and_stops_at_the_first_close():
    content, calls = parse_tool_calls(TWO, spec(parallel_tool_calls=False))
    assert [c["function"]["name"] for c in calls] == ["get_weather"]
    assert tool_stops(spec(parallel_tool_calls=False)) == ["</tool_call>"] and tool_stops(spec()) == []


def test_unknown_names_bad_json_and_tool_choice_none_are_text():
    for text in (
        '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>',
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": \n</tool_call>',
        "just words",
    ):
        assert parse_tool_calls(text, spec()) == (text, [])
    assert parse_tool_calls(TWO, spec(tool_choice="none")) == (TWO, [])
    # a reply cut by max_tokens before </tool_call> still holds a complete call
    content, calls = parse_tool_calls(
        '<tool_call>\n{"name": "get_time", "arguments": {"city": "Oslo"}}', spec()
    )
    assert content is None and json.loads(calls[0]["function"]["arguments"]) == {"city": "Oslo"}


def test_a_forced_call_is_a_call_even_when_its_arguments_are_not_json():
    named = spec(tool_choice={"type": "function", "function": {"name": "get_time"}})
    prefix = reply_prefix(named, None)
    assert prefix == '<tool_call>\n{"name": "get_time", "arguments": {'
    content, calls = parse_tool_calls(prefix + "city: Oslo}}\n</tool_call>", named)
    assert calls[0]["function"]["name"] == "get_time" and calls[0]["function"]["arguments"] == "{city: Oslo}"


def test_tool_choice_and_tools_are_validated():
    with pytest.raises(RequestError, match="not in 'tools'"):
        spec(tool_choice={"type": "function", "function": {"name": "nope"}})
    with pytest.raises(RequestError, match="tool_choice"):
        spec(tool_choice="always")
    with pytest.raises(RequestError, match=r"tools\[0\]"):
        parse_tools({"tools": [{"type": "function", "function": {"description": "no name"}}]})
    with pytest.raises(RequestError, match="needs 'tools'"):
        parse_tools({"tool_choice": "required"})
    assert parse_tools({"tools": []}) is None


def test_fallback_rendering_writes_tools_calls_and_results_as_text():
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        *tool_turn("c1", "get_weather", '{"city": "Oslo"}', "rain"),
    ]
    messages, tools = render_messages(history, spec(tool_choice="required"), None, native=False)
    assert tools is None  # the template is not given them: the system message has them
    assert messages[0]["content"].startswith("Be brief.\n\nYou can call functions.")
    assert (
        json.dumps(TOOLS[1]) in messages[0]["content"]
        and "You must call at least one function." in messages[0]["content"]
    )
    assert messages[2] == {
        "role": "assistant",
        "content": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
    }
    assert messages[3] == {"role": "user", "content": "<tool_response>\nrain\n</tool_response>"}
    native, tools = render_messages(history, spec(), None, native=True)
    assert tools == TOOLS and native[2]["tool_calls"][0]["function"]["arguments"] == {"city": "Oslo"}
    none, tools = render_messages(history[:2], spec(tool_choice="none"), None, native=False)
    assert tools is None and "You can call functions" not in json.dumps(none)
    assert FALLBACK_TOOLS_PROMPT.count("<tool_call>") == 1


def test_response_format_is_parsed():
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"]}
    fmt = parse_response_format(
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
    )
    assert (fmt.kind, fmt.schema, fmt.name) == ("json_schema", schema, "x")
    obj = parse_response_format({"response_format": {"type": "json_object"}})
    assert (obj.kind, obj.schema) == ("json_object", None)
    assert (
        parse_response_format({"response_format": {"type": "text"}}) is None
        and reply_prefix(None, obj) == "{"
    )
    with pytest.raises(RequestError, match="not a valid JSON schema"):
        parse_response_format(
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 12}}}}
        )
