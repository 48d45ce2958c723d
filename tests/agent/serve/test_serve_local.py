"""`harness serve` with the real embedded SmolLM2 over HTTP, through the real openai client (and litellm):
streaming token by token, stop inside the decoder, logprobs from the logits, /v1/completions, tools,
response_format, named adapters and 16 concurrent streaming clients."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import openai
import pytest

from agent.serve import start_server
from tests.helpers import tool_turn

pytestmark = pytest.mark.model

KEY = "test-key"
HAIKU = [{"role": "user", "content": "Write a haiku about the sea."}]
WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Current time in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from peft import LoraConfig, get_peft_model

    from agent.models import local_loading

    base, _ = local_loading.load_hf("smollm2-135m")
    lora = get_peft_model(
        base, LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    )  # random B: it changes the outputs
    folder = tmp_path_factory.mktemp("adapter") / "tuned"
    lora.save_pretrained(str(folder))
    srv = start_server("local:smollm2-135m", adapters={"tuned": str(folder)}, api_key=KEY)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def api(server):
    return openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0, timeout=300)


def whole(arguments: str) -> bool:
    """Whether a call's arguments are a whole JSON object (else max_tokens cut them: "length")."""
    try:
        return isinstance(json.loads(arguments), dict)
    except ValueError:
        return False


def ids_of(reply):
    return reply.choices[0].model_extra["token_ids"]


def test_stream_flows_while_decoding_and_equals_the_plain_reply(server, api):
    plain = api.chat.completions.create(model=server.name, messages=HAIKU, max_tokens=60, temperature=0)
    for _ in range(300):  # the decoder clears its batch right after delivering the reply
        if not server.model._current:
            break
        time.sleep(0.1)
    assert not server.model._current  # nothing is decoding now
    stream = api.chat.completions.create(
        model=server.name,
        messages=HAIKU,
        max_tokens=60,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = []
    for ch in stream:
        if (
            ch.choices
            and ch.choices[0].delta.content
            and not any(c.choices and c.choices[0].delta.content for c in chunks)
        ):
            # the first text arrived: the decoder must still be working on this request
            assert server.model._current, "the first token came after generation had ended"
        chunks.append(ch)
    texts = [ch.choices[0].delta.content for ch in chunks if ch.choices and ch.choices[0].delta.content]
    assert "".join(texts) == plain.choices[0].message.content
    assert len(texts) >= plain.usage.completion_tokens - 2  # one event per token (a few merge at UTF-8 seams)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == plain.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.model_dump() == plain.usage.model_dump()
    assert all(ch.usage is None for ch in chunks[:-1])


def test_stop_ends_generation_in_the_decoder_and_is_not_counted(server, api):
    tok = server.model.tokenizer
    full = api.chat.completions.create(
        model=server.name, messages=HAIKU, max_tokens=30, temperature=0, extra_body={"return_token_ids": True}
    )
    text = full.choices[0].message.content
    assert "\n" in text, text  # the haiku has more than one line
    cut = api.chat.completions.create(
        model=server.name,
        messages=HAIKU,
        max_tokens=30,
        temperature=0,
        stop=["\n"],
        extra_body={"return_token_ids": True},
    )
    assert cut.choices[0].message.content == text[: text.index("\n")]
    assert cut.choices[0].finish_reason == "stop"
    ids = ids_of(cut)
    assert (
        ids == ids_of(full)[: len(ids)]
        and cut.usage.completion_tokens == len(ids) < full.usage.completion_tokens
    )
    assert tok.decode(ids).startswith(cut.choices[0].message.content)
    assert "\n" not in tok.decode(ids[:-1])  # no token made only of the stop string is counted
    streamed = "".join(
        ch.choices[0].delta.content or ""
        for ch in api.chat.completions.create(
            model=server.name, messages=HAIKU, max_tokens=30, temperature=0, stop=["\n"], stream=True
        )
        if ch.choices
    )
    assert streamed == cut.choices[0].message.content  # the stop string is never streamed


def test_max_tokens_n_and_seed(server, api):
    short = api.chat.completions.create(
        model=server.name, messages=HAIKU, max_completion_tokens=3, temperature=0
    )
    assert short.usage.completion_tokens == 3 and short.choices[0].finish_reason == "length"
    short2 = api.chat.completions.create(model=server.name, messages=HAIKU, max_tokens=2, temperature=0)
    assert short2.usage.completion_tokens == 2
    a = api.chat.completions.create(
        model=server.name, messages=HAIKU, n=3, temperature=1.0, seed=5, max_tokens=10
    )
    b = api.chat.completions.create(
        model=server.name, messages=HAIKU, n=3, temperature=1.0, seed=5, max_tokens=10
    )
    c = api.chat.completions.create(
        model=server.name, messages=HAIKU, n=3, temperature=1.0, seed=6, max_tokens=10
    )
    assert [ch.index for ch in a.choices] == [0, 1, 2]
    texts = [ch.message.content for ch in a.choices]
    assert texts == [ch.message.content for ch in b.choices]  # same seed, same samples
    assert texts != [ch.message.content for ch in c.choices]
    assert len(set(texts)) > 1  # each choice its own sample
    assert a.usage.completion_tokens <= 30


def test_logprobs_are_the_model_own(server, api):
    import torch

    reply = api.chat.completions.create(
        model=server.name,
        messages=HAIKU,
        max_tokens=6,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
        extra_body={"return_token_ids": True},
    )
    entries = reply.choices[0].logprobs.content
    assert "".join(e.token for e in entries) == reply.choices[0].message.content
    prompt, out = reply.model_extra["prompt_token_ids"], ids_of(reply)
    model = server.model.model
    with torch.inference_mode():  # the independent judge: one forward pass over prompt + reply
        logp = torch.log_softmax(model(torch.tensor([prompt + out])).logits[0].float(), -1)
    for i, e in enumerate(entries):
        row = logp[len(prompt) - 1 + i]
        assert e.logprob == pytest.approx(float(row[out[i]]), abs=2e-3)
        assert (
            len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token
        )  # greedy: the top one was taken
        assert [t.logprob for t in e.top_logprobs] == sorted(
            (t.logprob for t in e.top_logprobs), reverse=True
        )
        assert e.top_logprobs[1].logprob == pytest.approx(float(row.topk(2).values[1]), abs=2e-3)
        assert bytes(e.bytes).decode() == e.token
    none = api.chat.completions.create(model=server.name, messages=HAIKU, max_tokens=2, temperature=0)
    assert none.choices[0].logprobs is None


def test_errors_have_the_reference_shape(server, api):
    with pytest.raises(openai.NotFoundError) as e:
        api.chat.completions.create(model="gpt-4o", messages=HAIKU)
    assert (
        set(e.value.body) == {"message", "type", "param", "code"}
        and e.value.body["code"] == "model_not_found"
    )
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.base_url, api_key="nope", max_retries=0).chat.completions.create(
            model=server.name, messages=HAIKU, max_tokens=1
        )
    with pytest.raises(openai.BadRequestError) as e:
        api.chat.completions.create(model=server.name, messages=[{"role": "wizard", "content": "x"}])
    assert e.value.body["param"] == "messages[0].role"
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):
        api.chat.completions.create(model=server.name, messages=HAIKU, top_logprobs=2)
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        api.chat.completions.create(
            model=server.name,
            messages=HAIKU,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "nope"}},
        )
    ok = api.chat.completions.create(
        model=server.name, messages=HAIKU, max_tokens=1, extra_body={"frequency_penalty_v9": 1, "top_k": 3}
    )  # unknown: ignored
    assert ok.usage.completion_tokens == 1


def test_completions_endpoint_and_token_ids(server, api):
    tok = server.model.tokenizer
    prompt = "The capital of France is"
    text = api.completions.create(
        model=server.name,
        prompt=prompt,
        max_tokens=5,
        temperature=0,
        logprobs=2,
        extra_body={"return_token_ids": True},
    )
    choice = text.choices[0]
    assert choice.model_extra["prompt_token_ids"] == tok(prompt)["input_ids"]
    assert tok.decode(choice.model_extra["token_ids"]) == choice.text and text.usage.completion_tokens == 5
    assert "".join(choice.logprobs.tokens) == choice.text and len(choice.logprobs.top_logprobs[0]) == 2
    by_ids = api.completions.create(
        model=server.name, prompt=tok(prompt)["input_ids"], max_tokens=5, temperature=0
    )
    assert by_ids.choices[0].text == choice.text
    two = api.completions.create(
        model=server.name, prompt=[prompt, "One, two, three,"], max_tokens=4, temperature=0, n=2
    )
    assert [c.index for c in two.choices] == [0, 1, 2, 3]
    assert (
        two.choices[0].text
        == two.choices[1].text
        == api.completions.create(model=server.name, prompt=prompt, max_tokens=4, temperature=0)
        .choices[0]
        .text
    )
    streamed = list(
        api.completions.create(model=server.name, prompt=prompt, max_tokens=5, temperature=0, stream=True)
    )
    assert "".join(c.choices[0].text for c in streamed) == choice.text
    assert streamed[-1].choices[0].finish_reason == "length"


def ask_with_tools(server, api, **kw):
    """A greedy chat request: by default the weather question with both tools; `kw` adds or replaces."""
    return api.chat.completions.create(
        **(dict(model=server.name, messages=WEATHER, tools=TOOLS, temperature=0) | kw)
    )


def test_named_tool_choice_gives_tool_calls(server, api):
    choice = {"type": "function", "function": {"name": "get_weather"}}
    reply = ask_with_tools(
        server, api, tool_choice=choice, max_tokens=30, extra_body={"return_token_ids": True}
    )
    msg = reply.choices[0].message
    # "tool_calls" for a whole call; SmolLM2 may still be writing its arguments at 30 tokens: then "length"
    # (as OpenAI says), and the call so far
    finish = reply.choices[0].finish_reason
    assert finish == ("tool_calls" if whole(msg.tool_calls[0].function.arguments) else "length")
    assert [c.function.name for c in msg.tool_calls] == ["get_weather"] and msg.tool_calls[
        0
    ].type == "function"
    assert isinstance(msg.tool_calls[0].function.arguments, str) and msg.tool_calls[0].id.startswith("call_")
    prompt = server.model.tokenizer.decode(reply.model_extra["prompt_token_ids"])
    assert "<tools>" in prompt and '"get_time"' in prompt  # SmolLM2's template has no tools: the fallback
    # streamed: the openai client's own accumulator rebuilds the same call
    stream = ask_with_tools(server, api, tool_choice=choice, max_tokens=30, stream=True)
    # streamed: the same call, its arguments in the chunks, and the same finish reason
    name, arguments, finishes = None, "", []
    for chunk in stream:
        for delta in chunk.choices[0].delta.tool_calls or []:
            name = name or delta.function.name
            arguments += delta.function.arguments or ""
        finishes += [chunk.choices[0].finish_reason] if chunk.choices[0].finish_reason else []
    assert (name, arguments, finishes) == ("get_weather", msg.tool_calls[0].function.arguments, [finish])


def test_tool_choice_none_required_and_history(server, api):
    none = ask_with_tools(
        server, api, tool_choice="none", max_tokens=12, extra_body={"return_token_ids": True}
    )
    assert none.choices[0].message.tool_calls is None and none.choices[0].message.content
    assert "<tools>" not in server.model.tokenizer.decode(none.model_extra["prompt_token_ids"])
    one_tool = ask_with_tools(server, api, tools=TOOLS[:1], tool_choice="required", max_tokens=30)
    assert one_tool.choices[0].message.tool_calls[0].function.name == "get_weather"
    history = WEATHER + tool_turn("call_1", "get_weather", '{"city": "Paris"}', "sunny, 21 C")
    after = ask_with_tools(
        server,
        api,
        messages=history,
        max_tokens=20,
        parallel_tool_calls=False,
        extra_body={"return_token_ids": True},
    )
    prompt = server.model.tokenizer.decode(after.model_extra["prompt_token_ids"])
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in prompt
    assert "<tool_response>\nsunny, 21 C\n</tool_response>" in prompt
    assert len(after.choices[0].message.tool_calls or []) <= 1


def test_required_with_several_tools_calls_a_real_one(server, api):
    tokyo = [{"role": "user", "content": "What time is it in Tokyo?"}]
    reply = ask_with_tools(server, api, messages=tokyo, tool_choice="required", max_tokens=30)
    calls = reply.choices[0].message.tool_calls
    assert calls and calls[0].function.name in {"get_weather", "get_time"}
    assert reply.choices[0].finish_reason == (
        "tool_calls" if whole(calls[0].function.arguments) else "length"
    )


def test_a_template_that_renders_tools_is_used_natively(server, api):
    """A chat template that knows tools (TRL's copy of Qwen2.5's) renders the tools and the structured
    history itself; the reply's <tool_call> is parsed the same way."""
    import trl

    tok = server.model.tokenizer
    saved = tok.chat_template
    tok.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    try:
        history = WEATHER + tool_turn("c1", "get_weather", '{"city": "Paris"}', "sunny")
        reply = ask_with_tools(
            server,
            api,
            messages=history,
            max_tokens=20,
            tool_choice={"type": "function", "function": {"name": "get_time"}},
            extra_body={"return_token_ids": True},
        )
        prompt = tok.decode(reply.model_extra["prompt_token_ids"])
        assert "# Tools" in prompt and "<tools>" in prompt  # the template's own tool preamble
        assert (
            '{"name": "get_weather", "arguments": {"city": "Paris"}}' in prompt
        )  # dict arguments, via tojson
        assert "<tool_response>\nsunny\n</tool_response>" in prompt
        assert "You can call functions" not in prompt  # not the fallback
        assert reply.choices[0].message.tool_calls[0].function.name == "get_time"
    finally:
        tok.chat_template = saved


def test_response_format_constrains_the_decoding(server, api):
    # As vLLM's structured outputs: the reply is JSON that matches the schema, or was cut off by max_tokens
    # (finish_reason "length"); never a message.refusal, which SDK users read as the model refusing.
    import jsonschema

    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "place", "schema": schema}}
    reply = api.chat.completions.create(
        model=server.name, messages=WEATHER, response_format=fmt, max_tokens=40, temperature=0
    )
    msg = reply.choices[0].message
    assert reply.choices[0].finish_reason == "stop" and msg.refusal is None
    jsonschema.validate(json.loads(msg.content), schema)
    # sampled, several choices: every one that ended matches
    sampled = api.chat.completions.create(
        model=server.name, messages=WEATHER, response_format=fmt, max_tokens=40, temperature=1.0, n=3, seed=7
    )
    for choice in sampled.choices:
        if choice.finish_reason == "stop":
            jsonschema.validate(json.loads(choice.message.content), schema)
    assert any(c.finish_reason == "stop" for c in sampled.choices)
    # streamed: the same text as the whole reply
    stream = api.chat.completions.create(
        model=server.name, messages=WEATHER, response_format=fmt, max_tokens=40, temperature=0, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == msg.content
    anything = api.chat.completions.create(
        model=server.name,
        messages=HAIKU,
        response_format={"type": "json_object"},
        max_tokens=60,
        temperature=0,
    )
    if anything.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(anything.choices[0].message.content), dict)
    # cut off by max_tokens: "length", the text so far, no refusal
    big = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 10**12}}, "required": ["n"]}
    cut = api.chat.completions.create(
        model=server.name,
        messages=WEATHER,
        response_format={"type": "json_schema", "json_schema": {"name": "big", "schema": big}},
        max_tokens=3,
        temperature=0,
    )
    assert cut.choices[0].finish_reason == "length" and cut.choices[0].message.refusal is None
    assert cut.choices[0].message.content.startswith('{"n"')
    with pytest.raises(openai.BadRequestError, match="schema") as caught:
        api.chat.completions.create(
            model=server.name,
            messages=WEATHER,
            max_tokens=2,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "no-such-type"}},
            },
        )
    assert caught.value.body["param"] == "response_format"
    with pytest.raises(openai.BadRequestError, match="cannot be enforced"):  # valid, but refers to nothing
        api.chat.completions.create(
            model=server.name,
            messages=WEATHER,
            max_tokens=2,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/no"}}},
        )


def test_a_tool_call_cut_off_by_max_tokens_finishes_with_length(server, api):
    choice = {"type": "function", "function": {"name": "get_weather"}}
    reply = ask_with_tools(server, api, tool_choice=choice, max_tokens=2)
    assert reply.choices[0].finish_reason == "length"  # as OpenAI: not "tool_calls" with broken arguments
    assert reply.usage.completion_tokens == 2


def test_tokenize_and_detokenize_in_vllms_shape(server):
    import urllib.error
    import urllib.request

    base = server.base_url.removesuffix("/v1")

    def post(path, body):
        req = urllib.request.Request(
            base + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read())

    tok = server.model.tokenizer
    out = post("/tokenize", {"model": server.name, "prompt": "Hello world", "return_token_strs": True})
    assert set(out) == {"count", "max_model_len", "tokens", "token_strs"}
    assert out["tokens"] == tok("Hello world")["input_ids"] and out["count"] == len(out["tokens"])
    assert out["max_model_len"] == server.model.context_window
    assert "".join(out["token_strs"]).replace("Ġ", " ") == "Hello world"
    assert post("/detokenize", {"model": server.name, "tokens": out["tokens"]}) == {"prompt": "Hello world"}
    # messages: rendered as a chat request is, so the count is that request's prompt_tokens
    chat = post("/v1/tokenize", {"model": server.name, "messages": WEATHER})
    reply = openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0).chat.completions.create(
        model=server.name, messages=WEATHER, max_tokens=1
    )
    assert chat["count"] == reply.usage.prompt_tokens and chat["token_strs"] is None
    assert post("/tokenize", {"prompt": "x"})["tokens"] == tok("x")["input_ids"]  # model is optional
    try:
        post("/detokenize", {"model": server.name, "tokens": [len(tok) + 5]})
        raise AssertionError("an id outside the vocabulary was accepted")
    except urllib.error.HTTPError as e:
        assert e.code == 400 and json.loads(e.read())["error"]["param"] == "tokens"


def test_named_adapter_is_chosen_by_model(server, api):
    assert {m.id for m in api.models.list().data} == {server.name, "tuned"}
    base = api.chat.completions.create(
        model=server.name, messages=HAIKU, max_tokens=3, temperature=0, logprobs=True
    )
    tuned = api.chat.completions.create(
        model="tuned", messages=HAIKU, max_tokens=3, temperature=0, logprobs=True
    )
    assert tuned.model == "tuned"
    assert [e.logprob for e in tuned.choices[0].logprobs.content] != [
        e.logprob for e in base.choices[0].logprobs.content
    ]


def test_sixteen_concurrent_streams_each_get_their_own_tokens(server, api):
    words = "apple river castle violin tiger planet garden rocket winter copper island pencil".split()
    words += "thunder marble falcon lantern".split()
    prompts = [f"Write one sentence about a {w}." for w in words]

    def ask(i, stream, out):
        msgs = [{"role": "user", "content": prompts[i]}]
        if not stream:
            out[i] = (
                api.chat.completions.create(model=server.name, messages=msgs, max_tokens=12, temperature=0)
                .choices[0]
                .message.content
            )
            return
        parts = []
        for ch in api.chat.completions.create(
            model=server.name, messages=msgs, max_tokens=12, temperature=0, stream=True
        ):
            parts.extend(ch.choices[0].delta.content or "" for _ in [0] if ch.choices)
        out[i] = "".join(parts)

    def all16(stream):
        out = [None] * 16
        threads = [threading.Thread(target=ask, args=(i, stream, out)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        return out

    plain = all16(stream=False)
    streamed = all16(stream=True)
    assert all(plain) and len(set(plain)) >= 12  # different prompts, different replies
    assert streamed == plain


def test_litellm_streams_and_calls_tools(server):
    from agent.models.common import import_litellm

    litellm = import_litellm()

    async def go():
        stream = await litellm.acompletion(
            model=f"openai/{server.name}",
            api_base=server.base_url,
            api_key=KEY,
            messages=HAIKU,
            max_tokens=8,
            temperature=0,
            stream=True,
            num_retries=0,
        )
        text = "".join([ch.choices[0].delta.content or "" async for ch in stream])
        tool = await litellm.acompletion(
            model=f"openai/{server.name}",
            api_base=server.base_url,
            api_key=KEY,
            messages=WEATHER,
            tools=TOOLS,
            max_tokens=30,
            temperature=0,
            num_retries=0,
            tool_choice={"type": "function", "function": {"name": "get_time"}},
        )
        return text, tool

    text, tool = asyncio.run(go())
    plain = openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0).chat.completions.create(
        model=server.name, messages=HAIKU, max_tokens=8, temperature=0
    )
    assert text == plain.choices[0].message.content
    assert tool.choices[0].message.tool_calls[0].function.name == "get_time"


def test_streamed_choices_and_logprobs_match_the_plain_reply(server, api):
    kwargs = dict(
        model=server.name,
        messages=HAIKU,
        max_tokens=8,
        temperature=1.0,
        seed=11,
        n=2,
        logprobs=True,
        top_logprobs=1,
    )
    plain = api.chat.completions.create(**kwargs)
    texts, entries = {0: "", 1: ""}, {0: [], 1: []}
    for ch in api.chat.completions.create(stream=True, **kwargs):
        for c in ch.choices:
            texts[c.index] += c.delta.content or ""
            entries[c.index] += [(e.token, e.logprob) for e in (c.logprobs.content if c.logprobs else [])]
    for choice in plain.choices:
        assert texts[choice.index] == choice.message.content
        expected = [(e.token, e.logprob) for e in choice.logprobs.content]
        assert [t for t, _ in entries[choice.index]] == [t for t, _ in expected]
        assert [lp for _, lp in entries[choice.index]] == pytest.approx([lp for _, lp in expected], abs=2e-3)


def test_a_client_that_leaves_stops_its_rows(server):
    import socket
    import time

    host, port = server.base_url.split("//")[1].split("/")[0].split(":")
    body = json.dumps(
        {
            "model": server.name,
            "messages": HAIKU,
            "max_tokens": 4000,
            "temperature": 1.0,
            "seed": 3,
            "stream": True,
        }
    ).encode()
    sock = socket.create_connection((host, int(port)), timeout=120)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer "
        + KEY.encode()
        + b"\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
    seen = b""
    while b"data: " not in seen:  # streaming has begun
        seen += sock.recv(4096)
    assert seen.startswith(b"HTTP/1.1 200")
    sock.close()  # the client goes away mid-reply
    deadline = time.monotonic() + 120  # a bound for a loaded machine, not a speed check
    while server.model._current and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not server.model._current, "the decoder kept generating for a client that left"
