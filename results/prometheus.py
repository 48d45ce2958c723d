"""The Prometheus metrics: what `harness eval` / `train` serve at --metrics-port (RunMetrics, fed by
results/telemetry_hooks.py; results/telemetry.py starts and stops it) and what `harness serve` serves at
/metrics (ServeMetrics). OTel's names where the conventions define one (gen_ai.client.token.usage ->
gen_ai_client_token_usage, ...), harness_* otherwise; METRICS and SERVE_METRICS list them all.
prometheus_client is imported when one is made, never before (`harness --help` does not load it)."""

from __future__ import annotations

from typing import Any

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
