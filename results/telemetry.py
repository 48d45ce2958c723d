"""Observability: traces that follow the OpenTelemetry GenAI semantic conventions, Prometheus metrics and
JSON event logs. Everything is off until a command switches it on, and off costs one attribute read per
span (no OpenTelemetry or prometheus_client import: `harness --help` never loads them).

- Traces: configure_tracing() exports when `--trace FILE` is given (OTLP JSON lines, no backend needed)
  or when the standard OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (OTLP over
  HTTP; the exporter reads the other OTEL_EXPORTER_OTLP_* variables itself). span() opens a span under
  the current one (`root=True`: a trace of its own). Prompts, replies, commands and outputs
  are recorded only with OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true (or span_only /
  span_and_event, the values of opentelemetry-util-genai).
- Metrics: start_metrics() serves /metrics on a port (eval, train); `harness serve` gives the text to its
  own route. results/prometheus.py defines them all.
- Logs: set_log_format("json") makes event() print one JSON object per line on stderr with the current
  trace id; the default ("human") prints nothing more than before.

The agent loop and the runner name none of this: while tracing or metrics are on, results/telemetry_hooks.py
hears what they announce (results/hooks.py) and makes the spans, metrics and events of an attempt.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from results.prometheus import RunMetrics

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
ENDPOINT_ENVS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")

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
    _listen()
    return True


def shutdown_tracing() -> None:
    """Sends what is buffered and switches tracing off (at exit, and before a reconfiguration)."""
    global _tracer, _provider
    provider, _tracer, _provider = _provider, None, None
    _listen()
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


def _listen() -> None:
    """The telemetry subscriber hears the loop and the runner exactly while tracing or metrics are on: off,
    their announcements go to nobody."""
    from results import hooks, telemetry_hooks

    if _tracer is not None or _metrics is not None:
        hooks.subscribe(telemetry_hooks.TELEMETRY)
    else:
        hooks.unsubscribe(telemetry_hooks.TELEMETRY)


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


def start_metrics(port: int, host: str = "127.0.0.1") -> RunMetrics:
    """Serves /metrics for this process on host:port (a daemon thread); the run's hooks feed it."""
    global _metrics
    try:
        from prometheus_client import start_http_server
    except ImportError:
        from results.errors import UserError

        raise UserError("--metrics-port needs prometheus-client: pip install 'harness[otel]'") from None
    from results.prometheus import RunMetrics

    stop_metrics()
    _metrics = RunMetrics()
    try:
        _metrics.server = start_http_server(port, host, registry=_metrics.registry)
    except OSError as e:
        from results.errors import UserError

        raise UserError(
            f"--metrics-port {port}: cannot listen on {host}:{port} ({e}); pick a free port"
        ) from None
    _listen()
    return _metrics


def stop_metrics() -> None:
    """Stops serving /metrics and switches the run's metrics off."""
    global _metrics
    m, _metrics = _metrics, None
    _listen()
    if m is not None and m.server:
        m.server[0].shutdown()
        m.server[0].server_close()


def metrics() -> Optional[RunMetrics]:
    """The run's metrics, or None when no --metrics-port was given."""
    return _metrics


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
