"""`harness serve`: models behind an OpenAI-compatible HTTP API, for the openai client, litellm and other
harnesses. Held to the OpenAI chat-completions reference:

    POST /v1/chat/completions   messages, model, n, temperature, seed, max_tokens / max_completion_tokens,
                                stop, stream + stream_options.include_usage, logprobs + top_logprobs,
                                tools + tool_choice + parallel_tool_calls, response_format
    POST /v1/completions        prompt (a string, a list of strings, token ids, or lists of token ids),
                                the same sampling fields; logprobs is an integer there, as in the reference
    GET  /v1/models             the served models (the base model and each named adapter)
    GET  /v1/models/{id}        one of them (OpenAI's Model object; 404 model_not_found otherwise)
    POST /tokenize, /detokenize vLLM's: {prompt} or {messages, tools, add_generation_prompt} -> {count,
                                max_model_len, tokens, token_strs}; {tokens} -> {prompt} (also under /v1)
    GET  /health                200 when up (no API key needed)

One access-log line per request (stderr for `harness serve`, else the logger agent.serve.handler):
client, "METHOD path", status, seconds, and for generations model=, prompt_tokens=, completion_tokens=.

Local models (`local:...`) decode in the continuous-batching decoder of agent/models/local.py: concurrent
requests share one batch, streaming sends each token as it is decoded, `stop` strings end generation in
the decoder (their tokens are neither returned nor counted in usage), and logprobs come from the
decoder's logits. Tools are rendered with the model's chat template or the documented fallback
(agent/serve/tools.py) and the model's <tool_call> blocks come back as `tool_calls`. Other backends
(replay scripts, API models) answer through Model.complete; streaming then sends the finished reply.

Extension for RL users: `"return_token_ids": true` in a request (the field vLLM uses) adds
`prompt_token_ids` to the response (per choice on /v1/completions) and `token_ids` (the exact generated
ids, end-of-turn token included when produced) to each choice; in a stream they come with each choice's
last chunk. `response_format` json_object / json_schema, for local models: the schema is given to the model
and constrains its decoding (llguidance masks every token that cannot continue a match, as vLLM's
structured outputs do), so the reply is JSON that matches, or finish_reason is "length" (max_tokens cut
it); a schema the decoder cannot enforce is a 400. With tools offered as well the reply may be a call
instead, so it is only asked for. finish_reason is "length" whenever max_tokens cut the reply, a tool call
included (as OpenAI says); "tool_calls" when the calls are whole.

Errors have the reference shape {"error": {"message", "type", "param", "code"}}: 400 for malformed
requests, 401 for a missing or wrong API key (--api-key), 404 for an unknown model or path. Unknown
request fields are ignored, as OpenAI does.

The package, one concept per module (each imports only those above it):
    tools.py     tools, tool_choice and response_format in the prompt; tool calls parsed from the reply
    requests.py  request bodies validated into ChatRequest / TextRequest (HTTPError for the 4xx answers)
    choices.py   one choice's text, logprobs, tool calls and usage, in either endpoint's shape
    local_replies.py  a local model's replies: jobs on the batching decoder, sent whole or streamed
    other_replies.py  the other backends' replies (Model.complete), sent whole or as one stream
    handler.py   the HTTP handler: routing, auth, the endpoints, the event stream
    server.py    start_server / serve and the --adapter values
    cli.py       the `harness serve` command
"""

from agent.serve.server import Server, parse_adapters, serve, start_server

__all__ = ["Server", "parse_adapters", "serve", "start_server"]
