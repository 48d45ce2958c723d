"""Starting `harness serve`: start_server (the model or models, the event loop their coroutines run on,
the HTTP server, all in background threads), serve (the command: until interrupted) and the --adapter
values."""

from __future__ import annotations

import asyncio
import re
import sys
import threading
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Optional

from agent.models import Model, get_model
from agent.serve.handler import Handler
from results import prometheus
from results.errors import UserError


def served_name(model: Model) -> str:
    """The id clients use: the spec without its backend prefix; a path's last part."""
    name = model.name.split(":", 1)[1] if model.name.startswith(("local:", "replay:")) else model.name
    return Path(name).name if "/" in name and Path(name).exists() else name


@dataclass
class Server:
    base_url: str  # e.g. http://127.0.0.1:8000/v1
    model: Model  # the base model
    name: str  # its served name
    stop: Callable[[], None]
    models: dict[str, Model] = field(default_factory=dict)  # every served name


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # many clients connect at once


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")


def parse_adapters(values: list[str]) -> tuple[Optional[str], dict[str, str]]:
    """--adapter values: (the one unnamed adapter applied to the base model, {name: folder})."""
    unnamed, named = None, {}
    for value in values:
        name, sep, folder = value.partition("=")
        if sep and _NAME.match(name) and not Path(value).exists():
            if name in named:
                raise UserError(f"--adapter {value}: the name {name!r} is given twice")
            named[name] = folder
        elif unnamed is not None:
            raise UserError(
                f"--adapter {value}: only one adapter can replace the base model; name the others "
                "(--adapter NAME=DIR) to serve them beside it"
            )
        else:
            unnamed = value
    return unnamed, named


def start_server(
    model: Model | str,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    name: Optional[str] = None,
    adapters: Optional[dict[str, str]] = None,
    api_key: Optional[str] = None,
    stop_after_block: bool = False,
    access_log: Optional[Callable[[str], Any]] = None,
    **options: Any,
) -> Server:
    """Serve a Model (or a spec for get_model, with options) in background threads; port 0 picks a free one.
    `adapters` {name: folder} serves LoRA adapters of a local spec beside the base model, each chosen by
    the request's `model`. `stop_after_block`: a local model's chat replies end after their first complete
    ``` block, as its own complete() does for the agent loop (evaluators/run/cluster.py serves the loop's
    model so, and its nodes get the replies and token ids one machine would). Returns Server(base_url, model,
    name, stop, models). `access_log` gets one line per request (default: the logger agent.serve.handler,
    INFO)."""
    model, served, models, made = _load_models(model, name, adapters, options)
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, name="serve-loop", daemon=True)
    loop_thread.start()

    def run(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    handler = _bound_handler(models, api_key, stop_after_block, access_log, run)
    try:
        httpd = _HTTPServer((host, port), handler)
    except OSError as e:
        loop.call_soon_threadsafe(loop.stop)
        raise UserError(f"cannot listen on {host}:{port}: {e.strerror or e}; pick another --port") from None
    http_thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="serve-http", daemon=True
    )
    http_thread.start()
    bound_host, bound_port = httpd.server_address[:2]

    def stop() -> None:
        httpd.shutdown()
        httpd.server_close()
        loop.call_soon_threadsafe(loop.stop)
        http_thread.join(timeout=10)
        loop_thread.join(timeout=10)
        for m in made:
            close = getattr(m, "close", None)
            if callable(close):
                close()

    return Server(
        base_url=f"http://{bound_host}:{bound_port}/v1", model=model, name=served, stop=stop, models=models
    )


def _load_models(
    model: Model | str, name: Optional[str], adapters: Optional[dict[str, str]], options: dict[str, Any]
) -> tuple[Model, str, dict[str, Model], list[Model]]:
    """(the base model, its served name, every model by served name, the ones made here, which stop()
    closes): a spec is loaded with options, and each named adapter is loaded beside it."""
    made = []
    if isinstance(model, str):
        spec = model
        model = get_model(spec, **options)
        made.append(model)
    elif adapters:
        raise UserError("named adapters need the model as a spec string (e.g. local:smollm2-135m)")
    served = name or served_name(model)
    models: dict[str, Model] = {served: model}
    for adapter_name, folder in (adapters or {}).items():
        if not spec.startswith("local:"):
            raise UserError(f"--adapter {adapter_name}={folder}: adapters apply to local models only")
        if adapter_name in models:
            raise UserError(f"--adapter {adapter_name}={folder}: the name is already served; pick another")
        models[adapter_name] = get_model(spec, **dict(options, adapter=folder))
        made.append(models[adapter_name])
    return model, served, models, made


def _bound_handler(
    models: dict[str, Model],
    api_key: Optional[str],
    stop_after_block: bool,
    access_log: Optional[Callable[[str], Any]],
    run: Callable[[Any], Any],
) -> type:
    """The Handler class with this server's settings: http.server builds one per request from a class."""
    return type(
        "BoundHandler",
        (Handler,),
        {
            "models": models,
            "api_key": api_key or None,
            "stop_after_block": stop_after_block,
            "metrics": _serve_metrics(models),
            "run": staticmethod(run),
            **({"access_log": staticmethod(access_log)} if access_log else {}),
        },
    )


def _serve_metrics(models: dict[str, Model]) -> Any:
    """GET /metrics's registry (None without prometheus-client: then /metrics is a 404 like any path)."""
    try:
        return prometheus.ServeMetrics(models)
    except ImportError:
        return None


def serve(
    spec: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    adapter: Optional[str] = None,
    adapters: Optional[dict[str, str]] = None,
    api_key: Optional[str] = None,
    options: Optional[dict[str, Any]] = None,
    out: Callable[[str], Any] = print,
) -> None:
    """Serve until interrupted (the `harness serve` command)."""
    options = dict(options or {}, **({"adapter": adapter} if adapter else {}))

    def access(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    server = start_server(spec, host, port, adapters=adapters, api_key=api_key, access_log=access, **options)
    out(
        f"serving {spec} as {', '.join(repr(n) for n in server.models)} at {server.base_url} "
        f"(OpenAI-compatible{'; API key required' if api_key else ''}; Ctrl-C stops)"
    )
    out(f"  use it with: --model openai-compat:{server.base_url}/{server.name}")
    try:
        threading.Event().wait()
    finally:
        server.stop()
