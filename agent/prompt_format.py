"""What the model is told and how its replies are read, for the loop's two protocols: native tool calls
(TOOLS, parse_tool_calls) or text, one ```bash block per reply (parse_text_reply). The prompts are the
templates in agent/prompts/, rendered by prompt(); opening_messages is the conversation before step one."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from string import Template

from agent.models.base import Completion
from results.schema import Action

PROMPTS = Path(__file__).parent / "prompts"
# The variables each prompt template is given (and must use): a template naming any other fails.
PROMPT_VARIABLES = {
    "system_tools": set(),
    "system_text": set(),
    "instance": {"instruction"},
    "observation": {"exit_code", "output"},
    "timeout": {"timeout", "output"},
    "format_error": {"problem"},
}


class PromptError(Exception):
    """A prompt template and the variables given to it disagree (a misspelt or missing $name)."""


def prompt(name: str, **values) -> str:
    path = PROMPTS / f"{name}.md"
    template = Template(path.read_text())
    if not template.is_valid():
        raise PromptError(f"{path}: a $ that is not a variable (write $$ for a literal $)")
    used, given = set(template.get_identifiers()), set(values)
    if used != given:
        problems = [f"unknown variable ${v}" for v in sorted(used - given)]
        problems += [f"${v} missing" for v in sorted(given - used)]
        raise PromptError(
            f"{path}: {', '.join(problems)} (it is given: {', '.join(sorted(given)) or 'nothing'})"
        )
    return template.substitute(**values).strip()


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run one shell command in /workspace; returns exit code and output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write a file with exactly this content (path relative to /workspace).",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "submit",
            "description": "Finish: the task is done.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]


BLOCK = re.compile(r"```[ \t]*([A-Za-z]*)[ \t]*\n(.*?)```", re.DOTALL)


def parse_text_reply(text: str) -> Action:
    """Text protocol: exactly one fenced shell block; `submit` alone in it ends the task."""
    blocks = [
        body for lang, body in BLOCK.findall(text) if lang.lower() in ("", "bash", "sh", "shell", "console")
    ]
    if len(blocks) != 1:
        problem = (
            "no ```bash block found."
            if not blocks
            else f"{len(blocks)} code blocks found, expected exactly one."
        )
        return Action(kind="format_error", content=problem)
    command = blocks[0].strip()
    if command in ("submit", "echo submit", "exit", "exit 0"):
        return Action(kind="submit")
    if not command:
        return Action(kind="format_error", content="the code block is empty.")
    return Action(kind="bash", command=command)


def parse_tool_calls(completion: Completion) -> list[Action]:
    actions = []
    for call in completion.tool_calls:
        args = call.arguments
        if call.name == "bash" and isinstance(args.get("command"), str):
            actions.append(Action(kind="bash", command=args["command"], tool_call_id=call.id))
        elif (
            call.name == "write_file"
            and isinstance(args.get("path"), str)
            and isinstance(args.get("content"), str)
        ):
            actions.append(
                Action(kind="write", path=args["path"], content=args["content"], tool_call_id=call.id)
            )
        elif call.name == "submit":
            actions.append(Action(kind="submit", tool_call_id=call.id))
        else:
            actions.append(
                Action(
                    kind="format_error",
                    tool_call_id=call.id,
                    content=f"unknown tool or bad arguments: {call.name}({json.dumps(args)[:200]}).",
                )
            )
    if not actions:
        actions.append(Action(kind="format_error", content="no tool call: call bash, write_file or submit."))
    return actions


def opening_messages(
    instruction: str,
    use_tools: bool,
    demonstration: bool = True,
    workdir: str = "/workspace",
    example: Sequence[dict] = (),
) -> list[dict]:
    """The conversation before the first step: the system prompt, the worked example (text protocol),
    the task's own example if it has one (a hint), and the task (pinned: never elided to fit the
    context window)."""
    system = prompt("system_tools" if use_tools else "system_text").replace("/workspace", workdir)
    messages = [{"role": "system", "content": system}]
    if demonstration and not use_tools:
        messages += json.loads((PROMPTS / "demonstration.json").read_text())
    messages += [dict(m) for m in example]
    return messages + [
        {"role": "user", "content": prompt("instance", instruction=instruction), "pinned": True}
    ]
