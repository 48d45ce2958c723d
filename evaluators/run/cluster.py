"""Attempts spread over a Ray cluster: one long-lived actor per node, the driver the only writer.

The pattern of SkyRL and verl: each node runs one `NodeWorker` actor, pinned there with Ray's
node-affinity scheduling. The actor makes its own Docker client and the run's backend's warm SandboxPool
on its node (a Docker client cannot be pickled; the backend has the "cluster" capability) and runs the
same `attempt_with_retries` coroutine as the single-machine path. Only task specs (once per node),
(task id, sample) pairs and finished records cross the wire, each record with the bytes it keeps (its
changes' objects within the keep caps, a Harbor attempt's verifier files); the driver stores those and
appends the records to the run folder, so resume, dedup and the lock work unchanged.

Images: the driver builds them (as on one machine); a node that lacks one gets it by `docker load`
of the driver's `docker save`, checked by image id (content-addressed), so every node runs the
very image the manifest names.

Node loss: an attempt whose node dies is put back in the queue and runs on another node. Its record
never reached the driver, and the driver writes each key once, so nothing is lost or duplicated.

Models: API models are called from the actors. An in-process model (local:..., with its LoRA adapter
when model_options names one) is served once by the driver (agent/serve/) and the actors call it over
HTTP as openai-compat: with return_token_ids, so the records carry the exact prompt and reply token ids
that a single-machine run records and that `harness train --cluster` trains on.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import socket
import sys
from pathlib import Path
from typing import Any, Callable, Optional

from results.errors import InfraError, UserError
from results.run_writer import RunStore
from results.schema import Attempt

ROOT = Path(__file__).resolve().parents[2]  # the checkout (this file: evaluators/run/cluster.py)
INSTALL_HINT = "pip install 'harness[cluster]' (ray==2.60.0) on the driver and on every node"
_ADDRESS = re.compile(r"^(auto|ray://[^\s:/]+:\d+|[^\s:/]+:\d+)$")


def import_ray():
    try:
        import ray
    except ModuleNotFoundError:
        raise UserError(f"--cluster needs Ray: {INSTALL_HINT}") from None
    return ray


def check_address(address: str) -> str:
    if not _ADDRESS.match(address or ""):
        raise UserError(
            f"--cluster {address!r}: give ray://HOST:PORT (Ray client), HOST:PORT (the head's GCS "
            "port, from a node of the cluster) or auto (the cluster this machine belongs to)"
        )
    return address


def connect(address: str):
    """ray.init for the driver; returns the ray module."""
    check_address(address)
    ray = import_ray()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        return ray
    # Workers import harness from this checkout when it is on their disk (a local cluster); elsewhere
    # harness must be installed on every node (same version: checked in NodeWorker.hello).
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    try:
        ray.init(address=address, runtime_env={"env_vars": env}, log_to_driver=False, logging_level="ERROR")
    except ModuleNotFoundError as e:  # ray:// needs the client extras (grpcio)
        raise UserError(
            f"--cluster {address}: the Ray client needs {e.name}: pip install 'ray[client]==2.60.0'"
        ) from None
    except ConnectionError as e:
        raise UserError(
            f"--cluster {address}: no Ray cluster answers ({str(e).splitlines()[0][:200]}); "
            "start one with `ray start --head` or check the address"
        ) from None
    return ray


def node_label() -> str:
    """Which machine ran an attempt: host name and the Ray node id's head (nodes may share a host)."""
    try:
        import ray

        # Asked outside Ray (a NodeWorker made in the driver, a test), get_runtime_context() would start a
        # local Ray instance that lives as long as the process: only a connected process has a node.
        node = ray.get_runtime_context().get_node_id()[:8] if ray.is_initialized() else "local"
    except Exception:
        node = "local"
    return f"{socket.gethostname()}/{node}"


class NodeWorker:
    """Runs attempts on one node. Made a Ray actor by `_actor_class()` (ray stays an optional import)."""

    def __init__(self, spec: dict[str, Any]):
        self.spec = spec
        self.tasks: dict[str, Any] = {}
        self.pool = None
        self.model = None
        self.model_slots: Optional[asyncio.Semaphore] = None
        self.node = node_label()

    def hello(self) -> dict[str, str]:
        from results.manifest import current_harness_version

        return {"node": self.node, "version": current_harness_version()}

    def missing_images(self, image_ids: list[str]) -> list[str]:
        import docker

        from agent.sandbox.backends.docker.client import docker_client

        client, missing = docker_client(), []
        for i in image_ids:
            try:
                client.images.get(i)
            except docker.errors.ImageNotFound:
                missing.append(i)
        return missing

    def load_images(self, tarball: bytes, expected: list[str]) -> None:
        from agent.sandbox.backends.docker.client import docker_client

        docker_client().images.load(tarball)
        still = self.missing_images(expected)
        if still:
            raise InfraError(f"node {self.node}: docker load did not yield {', '.join(still)}")

    async def start(self, tasks: list[Any]) -> None:
        """Takes the task specs and warms the pool and the model, inside the actor's event loop."""
        from agent.models import get_model
        from agent.sandbox import sandbox_backend

        self.tasks.update({t.id: t for t in tasks})
        if self.pool is None:
            s, cfg = self.spec, self.spec["config"]
            self.model = get_model(s["actor_model"], **s["actor_model_options"])
            self.model_slots = asyncio.Semaphore(s["model_slots"])
            Pool = sandbox_backend(cfg.sandbox).pool(cfg.sandbox_options)  # one with "cluster" (check_run)
            self.pool = Pool(run_id=s["run_id"], warm=s["slots"] + 1, max_containers=2 * s["slots"] + 2)

    async def attempt(self, task_id: str, sample: int, image: str) -> dict[str, Any]:
        from evaluators.run.policies import loop_policy

        s, task = self.spec, self.tasks[task_id]
        cfg = s["config"]  # the run's EvalConfig
        return await attempt_to_ship(
            task,
            lambda: loop_policy(self.model, cfg.loop, self.model_slots, sample),
            self.pool,
            image,
            node=self.node,
            run_id=s["run_id"],
            model_name=cfg.model,
            sample=sample,
            temperature=cfg.loop.temperature,
        )

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()
            self.pool = None
        if self.model is not None and hasattr(self.model, "close"):
            self.model.close()


class HeldObjects:
    """A node's stand-in for the run folder's objects/: RunStore.keep_changes itself (the same caps, diff
    and sha256 names) with each object held in memory, for the driver (the only writer) to store."""

    keep_changes = RunStore.keep_changes

    def __init__(self):
        self.objects: dict[str, bytes] = {}

    def put_object(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        self.objects[digest] = data
        return digest


async def attempt_to_ship(task, make_policy, pool, image: str, *, node: str, **kw) -> dict[str, Any]:
    """One attempt on a node (attempt.attempt_with_retries, its changes kept by HeldObjects), as shipped()."""
    from evaluators.run.attempt import attempt_with_retries

    held = HeldObjects()
    rec = await attempt_with_retries(
        task,
        make_policy,
        pool,
        image,
        keep=lambda t, ch: held.keep_changes(
            t.workspace_files, ch.files, ch.deleted, ch.executable, ch.links
        ),
        **kw,
    )
    rec.node = node
    return shipped(rec, held)


def shipped(rec: Attempt, held: HeldObjects) -> dict[str, Any]:
    """What crosses back from a node: the record, the objects its `changes` names (within the keep caps)
    and its kept files' bytes (a private attribute, which the record's JSON leaves out)."""
    named = set(rec.changes.files.values()) | {rec.changes.diff} if rec.changes else set()
    return {
        "record": rec.model_dump(mode="json"),
        "objects": {d: held.objects[d] for d in named if d in held.objects},
        "files": rec.file_data(),
    }


def received(raw: dict[str, Any], put_object: Callable[[bytes], str]) -> Attempt:
    """The driver's side of shipped(): the objects stored (durable) before the record is appended."""
    rec = Attempt.model_validate(raw["record"])
    for digest, data in raw.get("objects", {}).items():
        if put_object(data) != digest:
            raise InfraError(f"attempt {rec.key}: an object from node {rec.node} does not match its sha256")
    if raw.get("files"):
        rec.keep_files(raw["files"])  # RunStore.append writes them before the record
    return rec


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _actor_class():
    ray = import_ray()
    # num_cpus=0: the actor waits on Docker and models; the attempts' containers use the node's cores.
    # max_concurrency: one actor runs many attempts as coroutines on its event loop.
    return ray.remote(num_cpus=0, max_restarts=0, max_concurrency=1000)(NodeWorker)


def _is_node_loss(exc: BaseException) -> bool:
    import ray.exceptions as rex

    return isinstance(
        exc,
        (
            rex.RayActorError,
            rex.NodeDiedError,
            rex.LocalRayletDiedError,
            rex.WorkerCrashedError,
            rex.ObjectLostError,
        ),
    )


def _save_image(image_id: str) -> bytes:
    """`docker save` of one image, with its tag (harness/base:..., harness/task:... are looked up by tag);
    loading it elsewhere yields the same id (the digest of its config)."""
    from agent.sandbox.backends.docker.client import docker_client

    return b"".join(docker_client().images.get(image_id).save(named=True))


def _split(total: int, parts: int) -> list[int]:
    """`total` slots over `parts` nodes as evenly as possible, at least one each."""
    return [max(1, total // parts + (i < total % parts)) for i in range(parts)]


async def run_on_cluster(
    cfg: Any,
    todo: list[tuple[Any, int]],
    *,
    tasks: list[Any],
    images: dict[str, str],
    run_id: str,
    model_obj: Any,
    on_record: Callable[[Attempt], None],
    put_object: Callable[[bytes], str],
    log: Optional[Callable[[str], None]] = None,
) -> None:
    """Runs every (task, sample) of `todo` on the cluster cfg.cluster (cfg: the run's EvalConfig, which
    every node gets); on_record(rec) once per finished attempt, after put_object (RunStore.put_object) has
    stored the objects its kept changes name."""
    log = log or _log
    ray = connect(cfg.cluster)
    nodes = _nodes(ray, cfg.cluster)
    server, actor_model, actor_options = await _serve_model(ray, cfg, model_obj)
    slots = _split(cfg.concurrency, len(nodes))
    workers = _start_actors(
        nodes, slots, _split(cfg.model_slots, len(nodes)), cfg, run_id, actor_model, actor_options
    )
    try:
        hellos = await asyncio.gather(*(a.hello.remote() for a, _ in workers))
        _check_versions(hellos)
        await _ship_images(ray, [a for a, _ in workers], sorted(set(images.values())), log)
        task_ref = ray.put(tasks)
        await asyncio.gather(*(a.start.remote(task_ref) for a, _ in workers))
        log(f"cluster: {len(workers)} nodes, {sum(slots)} attempts in flight")
        await _drive(
            workers,
            [h["node"] for h in hellos],
            todo,
            images,
            lambda raw: on_record(received(raw, put_object)),
            log,
        )
    finally:
        await _close(ray, [a for a, _ in workers])
        if server is not None:
            server.stop()


def _nodes(ray, address: str) -> list[dict[str, Any]]:
    """The live nodes that get an actor: a node started with --num-cpus=0 (the usual way to keep work
    off a head node) gets none."""
    nodes = [n for n in ray.nodes() if n.get("Alive") and (n.get("Resources") or {}).get("CPU", 0) > 0]
    if not nodes:
        raise UserError(f"--cluster {address}: the cluster has no live node with CPUs")
    return nodes


async def _serve_model(ray, cfg: Any, model_obj: Any) -> tuple[Any, str, dict[str, Any]]:
    """(the server or None, the model spec and options the nodes use). In-process weights (local:, with
    model_options' adapter) are served once, here; the nodes' records then carry the served model's exact
    token ids, as one machine's do (training)."""
    if not cfg.model.startswith("local:"):
        return None, cfg.model, cfg.model_options
    from agent.serve import start_server

    server = await asyncio.to_thread(
        start_server,
        model_obj,
        ray.util.get_node_ip_address(),
        stop_after_block=getattr(model_obj, "stop_after_block", False),
    )
    options = {"return_token_ids": True, "context_window": model_obj.context_window}
    return server, f"openai-compat:{server.base_url}/{server.name}", options


def _start_actors(
    nodes: list[dict[str, Any]],
    slots: list[int],
    model_slots: list[int],
    cfg: Any,
    run_id: str,
    actor_model: str,
    actor_options: dict[str, Any],
) -> list[tuple[Any, int]]:
    """One NodeActor pinned to each node, with its share of the attempt and model slots: [(actor, slots)]."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    Actor = _actor_class()
    workers = []
    for n, k, mk in zip(nodes, slots, model_slots):
        spec = {
            "run_id": run_id,
            "config": cfg,
            "actor_model": actor_model,
            "actor_model_options": actor_options,
            "slots": k,
            "model_slots": mk,
        }
        a = Actor.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
            spec
        )
        workers.append((a, k))
    return workers


def _check_versions(hellos: list[dict[str, str]]) -> None:
    """Every node must run the driver's harness version: records and grading must not differ by node."""
    from results.manifest import current_harness_version

    for h in hellos:
        if h["version"] != current_harness_version():
            raise UserError(
                f"node {h['node']} runs harness {h['version']}, the driver {current_harness_version()}: "
                "install the same version on every node"
            )


async def _ship_images(ray, actors: list[Any], image_ids: list[str], log) -> None:
    missing = await asyncio.gather(*(a.missing_images.remote(image_ids) for a in actors))
    need = sorted({i for m in missing for i in m})
    if not need:
        return
    log(f"cluster: sending {len(need)} images to {sum(1 for m in missing if m)} nodes")
    for image_id in need:  # one at a time: an image can be hundreds of MB
        blob = ray.put(await asyncio.to_thread(_save_image, image_id))
        await asyncio.gather(
            *(a.load_images.remote(blob, [image_id]) for a, m in zip(actors, missing) if image_id in m)
        )


async def _drive(
    workers: list[tuple[Any, int]],
    labels: list[str],
    todo: list[tuple[Any, int]],
    images: dict[str, str],
    on_record: Callable[[dict], None],
    log: Callable[[str], None],
) -> None:
    """Lanes (k per node) pull attempts from one queue; a lane whose node died puts its attempt back."""
    queue: asyncio.Queue = asyncio.Queue()
    for item in todo:
        queue.put_nowait(item)
    remaining = len(todo)
    lanes_alive = sum(k for _, k in workers)
    finished = asyncio.Event()
    dead: set[int] = set()

    async def lane(i: int, actor):
        nonlocal remaining, lanes_alive
        try:
            while remaining:
                item = await _next(queue, finished)
                if item is None:
                    return
                task, sample = item
                if i in dead:
                    queue.put_nowait((task, sample))
                    return
                try:
                    raw = await actor.attempt.remote(task.id, sample, images[task.id])
                except Exception as e:
                    if not _is_node_loss(e):
                        raise
                    if i not in dead:
                        dead.add(i)
                        # its own line, also in the middle of the progress bar
                        log(
                            f"\ncluster: lost node {labels[i]} ({type(e).__name__}); "
                            "its attempts in flight run again on the other nodes"
                        )
                    queue.put_nowait((task, sample))  # runs again on a live node; no record was written
                    return
                on_record(raw)
                remaining -= 1
                if not remaining:
                    finished.set()
        finally:
            lanes_alive -= 1
            if lanes_alive == 0 and remaining:
                finished.set()

    await _all_lanes([lane(i, a) for i, (a, k) in enumerate(workers) for _ in range(k)])
    if remaining:
        raise InfraError(
            f"every node of the cluster was lost with {remaining} attempts to go; "
            "resume the run when the cluster is back"
        )


async def _next(queue: asyncio.Queue, finished: asyncio.Event) -> Optional[tuple[Any, int]]:
    """A lane's next (task, sample), or None once every attempt is finished or every lane is gone."""
    getter = asyncio.ensure_future(queue.get())
    waiter = asyncio.ensure_future(finished.wait())
    await asyncio.wait({getter, waiter}, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if not getter.done():
        getter.cancel()
        return None
    return getter.result()


async def _all_lanes(lanes: list[Any]) -> None:
    """Run the lanes to the end; one that fails cancels the others (and waits for them) before raising."""
    jobs = [asyncio.ensure_future(lane) for lane in lanes]
    try:
        await asyncio.gather(*jobs)
    except BaseException:
        for j in jobs:
            j.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        raise


async def _close(ray, actors: list[Any]) -> None:
    async def one(a):
        try:
            await asyncio.wait_for(a.close.remote(), timeout=60)  # its pool removes its containers
        except Exception:
            pass
        ray.kill(a)

    await asyncio.gather(*(one(a) for a in actors))
