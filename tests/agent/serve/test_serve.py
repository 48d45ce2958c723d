"""`harness serve` over real HTTP: the openai client, litellm and our own OpenAICompatModel as callers."""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest

from agent.models import get_model
from agent.serve import start_server

ROOT = Path(__file__).resolve().parents[3]
MSGS = [{"role": "user", "content": "hello"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "run a command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


@pytest.fixture
def serve_script(tmp_path):
    servers = []

    def make(replies):
        path = tmp_path / f"script{len(servers)}.json"
        path.write_text(json.dumps({"*": replies}))
        servers.append(start_server(f"replay:{path}"))
        return servers[-1]

    yield make
    for server in servers:
        server.stop()


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)


def post(server, path: str, body: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(
        server.base_url.removesuffix("/v1") + path, data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_response_has_the_openai_schema(serve_script):
    server = serve_script(["first reply"])
    status, body = post(
        server, "/v1/chat/completions", json.dumps({"model": server.name, "messages": MSGS}).encode()
    )
    assert status == 200
    assert set(body) == {"id", "object", "created", "model", "choices", "usage", "system_fingerprint"}
    assert body["id"].startswith("chatcmpl-") and body["object"] == "chat.completion"
    assert isinstance(body["created"], int) and body["model"] == server.name
    [choice] = body["choices"]
    assert choice["index"] == 0 and choice["finish_reason"] == "stop"
    assert choice["message"] == {"role": "assistant", "content": "first reply", "refusal": None}
    assert set(body["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}


def test_openai_client_lists_and_calls_the_model(serve_script):
    server = serve_script(["one", "two"])
    c = client(server)
    assert [m.id for m in c.models.list().data] == [server.name]
    first = c.chat.completions.create(model=server.name, messages=MSGS)
    assert first.choices[0].message.content == "one" and first.choices[0].finish_reason == "stop"
    two = c.chat.completions.create(model=server.name, messages=MSGS, n=2, stop=["w"])
    assert [ch.index for ch in two.choices] == [0, 1]
    assert [ch.message.content for ch in two.choices] == ["t", "t"]  # cut at the stop string


def test_tool_calls_come_back_in_openai_format(serve_script):
    server = serve_script(
        [{"content": "", "tool_calls": [{"name": "bash", "arguments": {"command": "ls -la"}}]}]
    )
    reply = client(server).chat.completions.create(model=server.name, messages=MSGS, tools=TOOLS)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "bash"
    assert json.loads(call.function.arguments) == {"command": "ls -la"}


def test_a_tool_call_cut_off_by_max_tokens_finishes_with_length(serve_script):
    # OpenAI says "length" when max_tokens cut the reply, tool call or not; "tool_calls" only for whole ones
    server = serve_script(
        [{"content": "", "tool_calls": [{"name": "bash", "arguments": {}}], "finish_reason": "length"}] * 2
    )
    reply = client(server).chat.completions.create(model=server.name, messages=MSGS, tools=TOOLS)
    assert reply.choices[0].finish_reason == "length"
    # streamed, the openai client's own accumulator sees the same and says so
    with pytest.raises(openai.LengthFinishReasonError):
        with client(server).chat.completions.stream(model=server.name, messages=MSGS, tools=TOOLS) as stream:
            for _ in stream:
                pass
            stream.get_final_completion()


def test_models_retrieve_gives_the_model_object_and_openai_404(serve_script):
    server = serve_script(["x"])
    c = client(server)
    model = c.models.retrieve(server.name)
    assert (model.id, model.object, model.owned_by) == (server.name, "model", "harness")
    with pytest.raises(openai.NotFoundError) as caught:
        c.models.retrieve("no-such-model")
    error = caught.value.body
    assert error["code"] == "model_not_found" and error["type"] == "invalid_request_error"
    assert error["param"] == "model" and "no-such-model" in error["message"]


def test_adapter_flags_split_named_and_unnamed(tmp_path):
    from agent.serve import parse_adapters
    from results.errors import UserError

    assert parse_adapters(["runs/a", "tuned=runs/b", "v2=/x/y"]) == (
        "runs/a",
        {"tuned": "runs/b", "v2": "/x/y"},
    )
    odd = tmp_path / "a=b"  # a folder whose name has "=" is a folder, not a name
    odd.mkdir()
    assert parse_adapters([str(odd)]) == (str(odd), {})
    with pytest.raises(UserError, match="only one adapter"):
        parse_adapters(["runs/a", "runs/b"])
    with pytest.raises(UserError, match="twice"):
        parse_adapters(["t=runs/a", "t=runs/b"])


def test_unknown_model_is_404_and_api_key_is_required(tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"*": ["a", "b", "c"]}))
    server = start_server(f"replay:{script}", api_key="sekret")
    try:
        with pytest.raises(openai.AuthenticationError) as e:
            openai.OpenAI(base_url=server.base_url, api_key="wrong", max_retries=0).models.list()
        assert e.value.body["code"] == "invalid_api_key" and set(e.value.body) == {
            "message",
            "type",
            "param",
            "code",
        }
        status, _ = post(
            server, "/v1/chat/completions", json.dumps({"model": server.name, "messages": MSGS}).encode()
        )
        assert status == 401  # no Authorization header at all
        good = openai.OpenAI(base_url=server.base_url, api_key="sekret", max_retries=0)
        with pytest.raises(openai.NotFoundError) as e:
            good.chat.completions.create(model="gpt-4o", messages=MSGS)
        assert e.value.body["code"] == "model_not_found" and e.value.body["param"] == "model"
        reply = good.chat.completions.create(
            model=server.name, messages=MSGS, extra_body={"top_k": 5, "some_new_field": {"x": 1}}
        )  # ignored
        assert reply.choices[0].message.content == "a"
    finally:
        server.stop()


def test_streaming_sends_the_whole_reply(serve_script):
    server = serve_script(["streamed text"])
    chunks = list(
        client(server).chat.completions.create(
            model=server.name, messages=MSGS, stream=True, stream_options={"include_usage": True}
        )
    )
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == "streamed text"
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert (
        chunks[-1].choices == []
        and chunks[-1].usage.total_tokens
        == chunks[-1].usage.prompt_tokens + chunks[-1].usage.completion_tokens
    )
    assert all(ch.usage is None for ch in chunks[:-1])


def test_bad_requests_get_openai_style_errors(serve_script):
    server = serve_script(["x"])
    with pytest.raises(openai.BadRequestError, match="messages"):
        client(server).chat.completions.create(model=server.name, messages=[])
    status, body = post(server, "/v1/chat/completions", b"{not json")
    assert status == 400 and "JSON" in body["error"]["message"]
    status, body = post(
        server, "/v1/chat/completions", json.dumps({"model": server.name, "messages": MSGS, "n": 0}).encode()
    )
    assert status == 400 and "'n'" in body["error"]["message"] and body["error"]["param"] == "n"
    status, body = post(server, "/v1/chat/completions", json.dumps({"messages": MSGS}).encode())
    assert status == 400 and body["error"]["param"] == "model"
    status, body = post(server, "/v1/completions", json.dumps({"model": server.name, "prompt": "x"}).encode())
    assert status == 400 and "chat only" in body["error"]["message"]  # a replay script has no tokenizer
    status, body = post(server, "/v1/embeddings", b"{}")
    assert status == 404


def test_model_errors_are_500_with_the_message(serve_script):
    server = serve_script(["only one"])
    c = client(server)
    c.chat.completions.create(model=server.name, messages=MSGS)
    with pytest.raises(openai.InternalServerError, match="1 replies"):
        c.chat.completions.create(model=server.name, messages=MSGS)


def test_litellm_calls_serve(serve_script):
    from agent.models.common import import_litellm

    server = serve_script(["via litellm"])
    litellm = import_litellm()
    reply = asyncio.run(
        litellm.acompletion(
            model=f"openai/{server.name}",
            api_base=server.base_url,
            api_key="unused",
            messages=MSGS,
            num_retries=0,
        )
    )
    assert reply.choices[0].message.content == "via litellm"


def test_our_backends_call_serve_end_to_end(serve_script):
    server = serve_script(
        [
            "plain",
            {"content": "", "tool_calls": [{"name": "bash", "arguments": {"command": "pwd"}}]},
            "via litellm backend",
        ]
    )
    model = get_model(f"openai-compat:{server.base_url}/{server.name}", supports_tools=True)
    [c] = asyncio.run(model.complete(MSGS))
    assert c.content == "plain" and c.finish_reason == "stop"
    [t] = asyncio.run(model.complete(MSGS, tools=TOOLS))
    assert t.tool_calls[0].name == "bash" and t.tool_calls[0].arguments == {"command": "pwd"}
    lite = get_model(f"openai/{server.name}", api_base=server.base_url)
    [c] = asyncio.run(lite.complete(MSGS))
    assert c.content == "via litellm backend" and c.cost == 0.0


def test_cli_serve_command_serves_until_stopped(tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"*": ["from the cli"]}))
    code = (
        "import argparse, sys; from agent.serve import cli; p = argparse.ArgumentParser(); "
        "cli.register(p.add_subparsers()); a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-u", "-c", code, "serve", "--model", f"replay:{script}", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert "serving" in line, line
        base_url = line.split(" at ")[1].split()[0]
        proc.stdout.readline()  # "use it with: ..."
        api = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0)
        reply = api.chat.completions.create(model="s.json", messages=MSGS)
        assert reply.choices[0].message.content == "from the cli"
        # one access-log line per request, as uvicorn/vLLM write them: method, path, status, time, tokens
        chat = proc.stdout.readline().split()
        assert chat[1:4] == ['"POST', '/v1/chat/completions"', "200"], chat
        assert chat[4].endswith("s") and float(chat[4][:-1]) >= 0
        assert chat[5:] == [
            "model=s.json",
            f"prompt_tokens={reply.usage.prompt_tokens}",
            f"completion_tokens={reply.usage.completion_tokens}",
        ]
        with pytest.raises(openai.NotFoundError):
            api.models.retrieve("nope")
        assert proc.stdout.readline().split()[1:4] == ['"GET', '/v1/models/nope"', "404"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_cli_registers_serve_with_defaults():
    parser = argparse.ArgumentParser()
    from agent.serve import cli

    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["serve"])
    assert (args.model, args.host, args.port, args.adapter) == ("local:smollm2-135m", "127.0.0.1", 8000, [])
    assert callable(args.func)


@pytest.mark.model
def test_serve_smollm2_to_the_openai_client_and_litellm():
    from agent.models.common import import_litellm

    server = start_server("local:smollm2-135m")
    try:
        assert server.name == "smollm2-135m"
        reply = client(server).chat.completions.create(
            model=server.name, messages=MSGS, max_tokens=6, temperature=0
        )
        text = reply.choices[0].message.content
        assert text and reply.usage.prompt_tokens > 5 and 1 <= reply.usage.completion_tokens <= 6
        again = import_litellm().completion(
            model=f"openai/{server.name}",
            api_base=server.base_url,
            api_key="x",
            messages=MSGS,
            max_tokens=6,
            temperature=0,
            num_retries=0,
        )
        assert again.choices[0].message.content == text  # greedy: the same reply through either client
    finally:
        server.stop()


def test_openai_compat_token_ids_stay_none_when_the_server_has_none(serve_script):
    server = serve_script(["from a script"])  # a replay model has no tokenizer: no ids to return
    model = get_model(f"openai-compat:{server.base_url}/{server.name}", return_token_ids="true")
    assert model.extra_params == {"return_token_ids": True}  # the request field vLLM and serve read
    [c] = asyncio.run(model.complete(MSGS))
    assert c.content == "from a script" and c.prompt_ids is None and c.completion_ids is None


@pytest.mark.model
def test_openai_compat_token_ids_are_the_served_local_model_own():
    """return_token_ids over HTTP gives the very ids the local model records in-process; a server started
    with stop_after_block ends the reply where the local model's own complete() does (the loop's rule)."""
    local = get_model("local:smollm2-135m")
    ask = [
        {
            "role": "user",
            "content": "Write a bash command in a ```bash block that creates hello.txt containing hi.",
        }
    ]
    [direct] = asyncio.run(local.complete(ask, max_tokens=48))
    assert direct.content.startswith("```") and direct.content.endswith("```")  # the block rule cut it
    servers = [start_server(local, stop_after_block=True), start_server(local)]
    try:
        url = f"openai-compat:{servers[0].base_url}/{servers[0].name}"
        [c] = asyncio.run(get_model(url, return_token_ids="true").complete(ask, max_tokens=48))
        assert c.prompt_ids == direct.prompt_ids and c.completion_ids == direct.completion_ids
        assert c.content == direct.content
        [plain] = asyncio.run(get_model(url).complete(ask, max_tokens=48))
        assert plain.content == c.content and plain.prompt_ids is None and plain.completion_ids is None
        url = f"openai-compat:{servers[1].base_url}/{servers[1].name}"
        [on] = asyncio.run(get_model(url, return_token_ids="true").complete(ask, max_tokens=48))
        assert on.prompt_ids == direct.prompt_ids  # a plain server decodes past the block, as OpenAI would
        assert on.completion_ids[: len(direct.completion_ids)] == direct.completion_ids
        assert len(on.completion_ids) > len(direct.completion_ids)
    finally:
        for s in servers:
            s.stop()
        local.close()
