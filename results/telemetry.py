"""Observability: traces that follow the OpenTelemetry GenAI semantic conventions, Prometheus metrics and
JSON event logs. Everything is off until a command switches it on, and off costs one attribute read per
span (no OpenTelemetry or prometheus_client import: `harness --help` never loads them).

- Traces: configure_tracing() exports when `--trace FILE` is given (OTLP JSON lines, no backend needed)
  or when the standard OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (OTLP over
  HTTP; the exporter reads the other OTEL_EXPORTER_OTLP_* variables itself). span() opens a span under
  the current one; attempt_span() starts one trace per attempt. Prompts, replies, commands and outputs
  are recorded only with OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true (or span_only /
  span_and_event, the values of opentelemetry-util-genai).
- Metrics: start_metrics() serves /metrics on a port (eval, train) or gives the text to a server's own
  route (serve). OTel's names where the conventions define one (gen_ai.client.token.usage ->
  gen_ai_client_token_usage, ...), harness_* otherwise. METRICS below lists them all.
- Logs: set_log_format("json") makes event() print one JSON object per line on stderr with the current
  trace id; the default ("human") prints nothing more than before.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from datetime import datetime, timezone
from typing import Any, Optional

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
ENDPOINT_ENVS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
AGENT_NAME = "harness"

_tracer: Any = None  # an OpenTelemetry Tracer once configure_tracing() switched tracing on
_provider: Any = None
_capture = False
_log_json = False
_metrics: Optional["RunMetrics"] = None


# ---------------------------------------------------------------- traces


def tracing() -> bool:
    return _tracer is not None


def capture_content() -> bool:
    """Whether spans carry prompts, replies, commands and outputs (off unless the convention's variable
    says so: true, span_only or span_and_event)."""
    return _tracer is not None and _capture


def configure_tracing(trace_file: Optional[str] = None, service: str = "harness") -> bool:
    """Switches tracing on when there is somewhere to send spans: `trace_file` (OTLP JSON, one export
    request per line) and/or an OTLP/HTTP endpoint from the environment. Returns whether it is on."""
    global _tracer, _provider, _capture
    endpoint = any(os.environ.get(k) for k in ENDPOINT_ENVS)
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true" or not (trace_file or endpoint):
        return tracing()
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        if not trace_file:  # an endpoint set for other programs must not stop this one
            print(
                "harness: OTEL_EXPORTER_OTLP_ENDPOINT is set but OpenTelemetry's SDK is not installed "
                "(pip install 'harness[otel]'): not tracing",
                file=sys.stderr,
            )
            return False
        from results.errors import UserError

        raise UserError(
            f"--trace {trace_file}: tracing needs OpenTelemetry's SDK: pip install 'harness[otel]'"
        ) from None
    shutdown_tracing()
    attrs = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": service}
    provider = TracerProvider(resource=Resource.create(attrs))
    if endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    if trace_file:
        provider.add_span_processor(BatchSpanProcessor(_json_file_exporter(trace_file)))
    _provider, _tracer = provider, provider.get_tracer("harness")
    _capture = os.environ.get(CAPTURE_ENV, "").strip().lower() in ("true", "1", "span_only", "span_and_event")
    import atexit

    atexit.register(shutdown_tracing)
    return True


def shutdown_tracing() -> None:
    """Sends what is buffered and switches tracing off (at exit, and before a reconfiguration)."""
    global _tracer, _provider
    provider, _tracer, _provider = _provider, None, None
    if provider is not None:
        provider.shutdown()


def _json_file_exporter(path: str) -> Any:
    """An exporter writing each batch as one line of OTLP JSON (the OpenTelemetry Collector's file format:
    an ExportTraceServiceRequest, hex trace and span ids), readable without any backend."""
    import base64

    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    def hex_ids(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId") else hex_ids(v)
                for k, v in node.items()
            }
        if isinstance(node, list):
            return [hex_ids(v) for v in node]
        return node

    class JsonFileExporter(SpanExporter):
        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.file = open(path, "a", encoding="utf-8")

        def export(self, spans):
            line = json.dumps(hex_ids(MessageToDict(encode_spans(spans), use_integers_for_enums=True)))
            with self.lock:
                self.file.write(line + "\n")
                self.file.flush()
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            with self.lock:
                self.file.close()

    return JsonFileExporter()


class _NoSpan:
    """What span() gives while tracing is off: every method does nothing."""

    trace_id = ""

    def __enter__(self) -> "_NoSpan":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def set(self, attrs: dict[str, Any]) -> None:
        pass

    def event(self, name: str, attrs: Optional[dict[str, Any]] = None) -> None:
        pass


NO_SPAN = _NoSpan()


class _Span:
    def __init__(self, name: str, attrs: dict[str, Any], kind: str, root: bool):
        self.name, self.attrs, self.kind, self.root = name, attrs, kind, root
        self.span: Any = None

    def __enter__(self) -> "_Span":
        from opentelemetry import context, trace

        kind = getattr(trace.SpanKind, self.kind)
        ctx, links = None, ()
        if self.root:  # a trace of its own, linked to whatever it runs under (a train phase)
            parent = trace.get_current_span().get_span_context()
            ctx, links = context.Context(), ([trace.Link(parent)] if parent.is_valid else ())
        self.span = _tracer.start_span(self.name, ctx, kind, _clean(self.attrs), links)
        self._token = context.attach(trace.set_span_in_context(self.span))
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        from opentelemetry import context, trace

        if exc_type is not None and not isinstance(exc, GeneratorExit):
            name = "timeout" if issubclass(exc_type, TimeoutError) else exc_type.__name__
            if not self.span.attributes.get("error.type"):
                self.span.set_attribute("error.type", name)
            self.span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)[:500]))
        context.detach(self._token)
        self.span.end()

    @property
    def trace_id(self) -> str:
        return format(self.span.get_span_context().trace_id, "032x")

    def set(self, attrs: dict[str, Any]) -> None:
        self.span.set_attributes(_clean(attrs))

    def event(self, name: str, attrs: Optional[dict[str, Any]] = None) -> None:
        self.span.add_event(name, _clean(attrs or {}))


def _clean(attrs: dict[str, Any]) -> dict[str, Any]:
    """Attribute values OpenTelemetry accepts: None dropped, other objects as text."""
    out = {}
    for k, v in attrs.items():
        if v is None:
            continue
        if isinstance(v, (list, tuple)):
            v = [x if isinstance(x, (str, bool, int, float)) else str(x) for x in v]
        elif not isinstance(v, (str, bool, int, float)):
            v = str(v)
        out[k] = v
    return out


def span(name: str, attrs: Optional[dict[str, Any]] = None, kind: str = "INTERNAL", root: bool = False):
    """A context manager for one span (NO_SPAN while tracing is off). `root` starts a new trace."""
    if _tracer is None:
        return NO_SPAN
    return _Span(name, attrs or {}, kind, root)


def current_trace_id() -> str:
    if _tracer is None:
        return ""
    from opentelemetry import trace

    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else ""


def provider_name(model: str) -> str:
    """gen_ai.provider.name for a model string: litellm's provider prefix (openai, anthropic, ...), the
    OpenAI API for openai-compat servers, and our own backends by name."""
    if model.startswith("openai-compat:"):
        return "openai"
    if model.startswith(("local:", "replay:")):
        return "harness." + model.split(":", 1)[0]
    prefix = model.split("/", 1)[0] if "/" in model else "openai"
    return {"gemini": "gcp.gemini", "vertex_ai": "gcp.vertex_ai", "bedrock": "aws.bedrock"}.get(
        prefix, prefix
    )


def messages_attr(messages: list[dict[str, Any]]) -> str:
    """Chat messages in the conventions' shape (role + parts), as the JSON text of gen_ai.input.messages."""
    out = []
    for m in messages:
        parts: list[dict[str, Any]] = []
        if m.get("content"):
            parts.append({"type": "text", "content": m["content"]})
        for c in m.get("tool_calls") or []:
            fn = c.get("function", {})
            parts.append(
                {
                    "type": "tool_call",
                    "id": c.get("id"),
                    "name": fn.get("name"),
                    "arguments": fn.get("arguments"),
                }
            )
        if m.get("role") == "tool":
            parts = [
                {"type": "tool_call_response", "id": m.get("tool_call_id"), "response": m.get("content")}
            ]
        out.append({"role": m.get("role"), "parts": parts})
    return json.dumps(out)


# ---------------------------------------------------------------- logs


def set_log_format(fmt: str) -> None:
    global _log_json
    _log_json = fmt == "json"


def json_logs() -> bool:
    return _log_json


def event(name: str, **fields: Any) -> None:
    """One structured event (attempt started/finished, retry, infra error, resume decision): a JSON line on
    stderr with --log-format json, nothing otherwise."""
    if not _log_json:
        return
    line = {"ts": datetime.now(timezone.utc).isoformat(timespec="milliseconds"), "event": name}
    line.update({k: v for k, v in fields.items() if v is not None})
    line.setdefault("trace_id", current_trace_id() or None)
    if line["trace_id"] is None:
        del line["trace_id"]
    print(json.dumps(line, default=str), file=sys.stderr, flush=True)


# ---------------------------------------------------------------- metrics

# name, type, help. The gen_ai_* ones are the conventions' (OTel name, dots as underscores, unit suffix).
METRICS = [
    (
        "gen_ai_client_operation_duration_seconds",
        "histogram",
        "model call duration (chat), by model and error",
    ),
    ("gen_ai_client_token_usage", "histogram", "tokens per model call, by gen_ai_token_type input/output"),
    ("gen_ai_execute_tool_duration_seconds", "histogram", "sandbox command duration, by tool"),
    ("harness_attempts_total", "counter", "finished attempts by status and reason"),
    ("harness_attempt_duration_seconds", "histogram", "attempt wall time, by status"),
    ("harness_attempts_in_flight", "gauge", "attempts started and not finished"),
    ("harness_retries_total", "counter", "attempt retries after an infrastructure error, by cause"),
    ("harness_sandbox_acquire_seconds", "histogram", "time to get a sandbox, by warm=true/false"),
    ("harness_sandbox_acquires_total", "counter", "sandboxes handed out, by warm=true (from the pool)/false"),
    ("harness_warm_pool_hit_ratio", "gauge", "share of sandboxes that came warm from the pool"),
    ("harness_containers_alive", "gauge", "containers of this process's pools (warm and in use)"),
    ("harness_cost_usd_total", "counter", "model spend so far (USD)"),
]
SERVE_METRICS = [
    ("harness_serve_requests_total", "counter", "requests by endpoint and HTTP status"),
    ("gen_ai_server_request_duration_seconds", "histogram", "request duration, by endpoint"),
    ("gen_ai_server_time_to_first_token_seconds", "histogram", "time from submission to the first token"),
    ("gen_ai_server_time_per_output_token_seconds", "histogram", "decode time per token after the first"),
    ("harness_serve_tokens_total", "counter", "prompt (input) and generated (output) tokens"),
    ("harness_serve_queue_depth", "gauge", "requests waiting to join the decoder's batch"),
    ("harness_serve_batch_rows", "gauge", "rows being decoded together"),
    ("harness_serve_batch_occupancy_ratio", "gauge", "rows being decoded / the batch's capacity"),
    ("harness_serve_prefix_cache_hits_total", "counter", "prompts that reused cached keys/values"),
    ("harness_serve_prefix_cache_reused_tokens_total", "counter", "prompt tokens not recomputed"),
]

DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144)
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class RunMetrics:
    """The metrics of `harness eval` / `train` in one prometheus_client registry."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = r = CollectorRegistry()
        model = ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model"]
        self.op_duration = Histogram(
            "gen_ai_client_operation_duration",
            METRICS[0][2],
            model + ["error_type"],
            unit="seconds",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.tokens = Histogram(
            "gen_ai_client_token_usage",
            METRICS[1][2],
            model + ["gen_ai_token_type"],
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.tool_duration = Histogram(
            "gen_ai_execute_tool_duration",
            METRICS[2][2],
            ["gen_ai_tool_name"],
            unit="seconds",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.attempts = Counter("harness_attempts", METRICS[3][2], ["status", "reason"], registry=r)
        self.attempt_duration = Histogram(
            "harness_attempt_duration",
            METRICS[4][2],
            ["status"],
            unit="seconds",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge("harness_attempts_in_flight", METRICS[5][2], registry=r)
        self.retries = Counter("harness_retries", METRICS[6][2], ["cause"], registry=r)
        self.acquire = Histogram(
            "harness_sandbox_acquire",
            METRICS[7][2],
            ["warm"],
            unit="seconds",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.acquires = Counter("harness_sandbox_acquires", METRICS[8][2], ["warm"], registry=r)
        self.hit_ratio = Gauge("harness_warm_pool_hit_ratio", METRICS[9][2], registry=r)
        self.containers = Gauge("harness_containers_alive", METRICS[10][2], registry=r)
        self.cost = Counter("harness_cost_usd", METRICS[11][2], registry=r)
        self.server: Any = None  # (HTTP server, thread) of start_metrics
        self.pools: list[Any] = []  # the live SandboxPools, read at scrape time
        self.containers.set_function(lambda: sum(getattr(p, "_live", 0) for p in self.pools))
        self._hits = self._acquired = 0

    def acquired(self, seconds: float, warm: bool) -> None:
        self.acquire.labels(str(warm).lower()).observe(seconds)
        self.acquires.labels(str(warm).lower()).inc()
        self._acquired += 1
        self._hits += warm
        self.hit_ratio.set(self._hits / self._acquired)


def start_metrics(port: int, host: str = "127.0.0.1") -> RunMetrics:
    """Serves /metrics for this process on host:port (a daemon thread); the run's hooks feed it."""
    global _metrics
    try:
        from prometheus_client import start_http_server
    except ImportError:
        from results.errors import UserError

        raise UserError("--metrics-port needs prometheus-client: pip install 'harness[otel]'") from None
    stop_metrics()
    _metrics = RunMetrics()
    try:
        _metrics.server = start_http_server(port, host, registry=_metrics.registry)
    except OSError as e:
        from results.errors import UserError

        raise UserError(
            f"--metrics-port {port}: cannot listen on {host}:{port} ({e}); pick a free port"
        ) from None
    return _metrics


def stop_metrics() -> None:
    """Stops serving /metrics and switches the run's metrics off."""
    global _metrics
    m, _metrics = _metrics, None
    if m is not None and m.server:
        m.server[0].shutdown()
        m.server[0].server_close()


def metrics() -> Optional[RunMetrics]:
    """The run's metrics, or None when no --metrics-port was given."""
    return _metrics


def record_chat(
    model: str, seconds: float, input_tokens: int, output_tokens: int, error: Optional[str] = None
) -> None:
    m = _metrics
    if m is None:
        return
    labels = ("chat", provider_name(model), model)
    m.op_duration.labels(*labels, error or "").observe(seconds)
    if error is None:
        m.tokens.labels(*labels, "input").observe(input_tokens)
        m.tokens.labels(*labels, "output").observe(output_tokens)


def record_tool(tool: str, seconds: float) -> None:
    if _metrics is not None:
        _metrics.tool_duration.labels(tool).observe(seconds)


class ServeMetrics:
    """The metrics of `harness serve`: request counts and latencies observed by the handler, and the
    local decoder's queue, batch and prefix-cache figures read from each model's stats() at scrape time."""

    def __init__(self, models: dict[str, Any]) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        self.registry = r = CollectorRegistry()
        self.requests = Counter(
            "harness_serve_requests", SERVE_METRICS[0][2], ["endpoint", "status"], registry=r
        )
        self.duration = Histogram(
            "gen_ai_server_request_duration",
            SERVE_METRICS[1][2],
            ["endpoint"],
            unit="seconds",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "gen_ai_server_time_to_first_token",
            SERVE_METRICS[2][2],
            ["gen_ai_request_model"],
            unit="seconds",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.per_token = Histogram(
            "gen_ai_server_time_per_output_token",
            SERVE_METRICS[3][2],
            ["gen_ai_request_model"],
            unit="seconds",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens = Counter("harness_serve_tokens", SERVE_METRICS[4][2], ["gen_ai_token_type"], registry=r)

        class Decoder:  # one collector for the decoders' own counters (shared by the served names)
            def collect(self):
                queue = GaugeMetricFamily("harness_serve_queue_depth", SERVE_METRICS[5][2])
                rows = GaugeMetricFamily("harness_serve_batch_rows", SERVE_METRICS[6][2])
                occ = GaugeMetricFamily("harness_serve_batch_occupancy_ratio", SERVE_METRICS[7][2])
                hits = CounterMetricFamily("harness_serve_prefix_cache_hits", SERVE_METRICS[8][2])
                reused = CounterMetricFamily("harness_serve_prefix_cache_reused_tokens", SERVE_METRICS[9][2])
                stats = [
                    m.stats() for m in {id(m): m for m in models.values()}.values() if hasattr(m, "stats")
                ]
                capacity = sum(s["max_batch"] for s in stats)
                queue.add_metric([], sum(s["queued"] for s in stats))
                rows.add_metric([], sum(s["rows"] for s in stats))
                occ.add_metric([], sum(s["rows"] for s in stats) / capacity if capacity else 0.0)
                hits.add_metric([], sum(s["prefix_hits"] for s in stats))
                reused.add_metric([], sum(s["prefix_reused_tokens"] for s in stats))
                return [queue, rows, occ, hits, reused]

        r.register(Decoder())

    def exposition(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


# ---------------------------------------------------------------- command-line options


def add_options(parser: Any, metrics_port: bool = True) -> None:
    """--trace FILE, --log-format and (eval, train) --metrics-port N, the same on every command."""
    parser.add_argument(
        "--trace",
        metavar="FILE",
        help="write OpenTelemetry traces to FILE as OTLP JSON lines (also exported to "
        "$OTEL_EXPORTER_OTLP_ENDPOINT when that is set)",
    )
    if metrics_port:
        parser.add_argument(
            "--metrics-port",
            type=int,
            metavar="N",
            help="serve Prometheus metrics at http://127.0.0.1:N/metrics",
        )
    parser.add_argument(
        "--log-format",
        choices=("human", "json"),
        default="human",
        help="json: one JSON object per event on stderr, with the trace id (default: human)",
    )


def apply_options(args: Any, service: str) -> None:
    set_log_format(getattr(args, "log_format", "human"))
    configure_tracing(getattr(args, "trace", None), service)
    if getattr(args, "metrics_port", None) is not None:
        start_metrics(args.metrics_port)
