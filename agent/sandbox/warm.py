"""WarmPool, the pool of the backends whose sandboxes are made one by one on this machine (Docker's, the
docker CLI's): `warm` started sandboxes per (image, limits) ready to hand out, at most `max_containers` at
once, each used once and destroyed; close() removes every sandbox (and the network) the pool made, and so
does the process's exit or SIGTERM (pruned_at_exit). A backend's subclass says how one sandbox and one
network are made and how the pool's leftovers are pruned (create, create_network, prune_pool)."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import signal
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Mapping, Optional

from agent.sandbox.contract import SandboxSpec, pooled
from agent.sandbox.served import ServedSandbox

_at_exit: dict[str, Callable[[], object]] = {}  # pool id -> what prunes its leftovers


def pruned_at_exit(pool_id: str, prune: Callable[[], object]):
    """Prunes this pool's leftovers when the process exits or gets SIGTERM (if close() did not already)."""
    if not _at_exit:
        atexit.register(_prune_all)
        with contextlib.suppress(ValueError):  # only possible in the main thread
            previous = signal.getsignal(signal.SIGTERM)

            def handler(signum, frame, previous=previous):
                _prune_all()
                if callable(previous):
                    previous(signum, frame)
                raise SystemExit(128 + signum)

            signal.signal(signal.SIGTERM, handler)
    _at_exit[pool_id] = prune


def _prune_all():
    for pool_id in list(_at_exit):
        with contextlib.suppress(Exception):
            _at_exit.pop(pool_id)()


class WarmPool:
    """A SandboxPool (agent/sandbox/contract.py) of sandboxes made on this machine. Keeps `warm` started
    sandboxes per (image, limits) ready; acquire() takes one in milliseconds, release() destroys it and the
    pool refills in the background. At most `max_containers` exist at once (warm + in use). Subclasses
    provide create, create_network and prune_pool (blocking: they run in the pool's engine threads)."""

    # -- what a backend provides --------------------------------------------------------------------------
    def create(self, image: str, limits: SandboxSpec, task: str, network: Optional[str]) -> ServedSandbox:
        """One started sandbox of this pool (its run's and pool's labels), on `network` when networked."""
        raise NotImplementedError

    def create_network(self) -> str:
        """The pool's own network for its networked sandboxes (made once, on first use); its name."""
        raise NotImplementedError

    def prune_pool(self) -> None:
        """Removes whatever of this pool is left (its sandboxes, then its network)."""
        raise NotImplementedError

    def __init__(self, run_id: Optional[str] = None, warm: int = 2, max_containers: int = 8):
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.pool_id = uuid.uuid4().hex[:12]  # close() removes exactly this pool's containers
        self.warm = warm
        self.max_containers = max(1, max_containers)
        self._ready: dict[tuple, deque[ServedSandbox]] = {}
        self._live = 0  # containers existing or being created
        self._in_use: set[ServedSandbox] = set()
        self._cond: Optional[asyncio.Condition] = None
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        self._network: Optional[asyncio.Future] = None
        self._refilling: dict[tuple, int] = {}
        self._demand: Optional[int] = None  # acquires still expected (expect()); None: unknown
        self._image_demand: Optional[dict[str, int]] = None  # the same per image, where the caller knows
        self._reclaimers: list[Callable[[], Optional[ServedSandbox]]] = []
        # Engine calls (create+start, remove) block for hundreds of ms each and the engine runs many at
        # once: on asyncio's default executor (cores + 4 threads) they queued behind each other, so the pool
        # could not keep `max_containers` busy (issue 25). One thread per container that can exist.
        self._engine = ThreadPoolExecutor(
            max_workers=self.max_containers + max(warm, 0) + 2, thread_name_prefix="sandbox-engine"
        )
        pruned_at_exit(self.pool_id, self.prune_pool)

    def add_reclaimer(self, take_idle: Callable[[], Optional[ServedSandbox]]):
        """`take_idle()` gives up one acquired sandbox that its user keeps idle for reuse (or None): when the
        pool is full, acquire() destroys such a one rather than wait for a release that may never come."""
        self._reclaimers.append(take_idle)

    def expect(self, acquires: int, per_image: Optional[Mapping[str, int]] = None):
        """How many more acquire() calls will come (the runner knows: an agent and a grading container per
        attempt), and of each image where `per_image` says (an image it leaves out: none). Warm containers
        beyond that are never made: each one costs a create and a destroy of engine time that nothing uses
        (at 10 attempts of concurrency 8, one in three containers was such a one; with an image per task, as
        Terminal-Bench's, warming by the total alone made two in five so)."""
        self._demand = max(0, acquires)
        self._image_demand = None if per_image is None else {i: max(0, n) for i, n in per_image.items()}

    def _in_thread(self, fn, *args):
        return asyncio.get_running_loop().run_in_executor(self._engine, functools.partial(fn, *args))

    async def network_for(self, limits: SandboxSpec) -> Optional[str]:
        """The pool's own network, made on first use by a networked sandbox; None for the others."""
        if not limits.network:
            return None
        if self._network is None:
            self._network = asyncio.ensure_future(asyncio.to_thread(self.create_network))
        return await asyncio.shield(self._network)

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    async def acquire(
        self, image: str, limits: SandboxSpec = SandboxSpec(), task: str = "pool"
    ) -> ServedSandbox:
        key = (image, limits)
        cond = self._condition()
        if self._demand is not None:
            self._demand = max(0, self._demand - 1)
        if self._image_demand is not None and self._image_demand.get(image):
            self._image_demand[image] -= 1
        async with cond:
            while True:
                ready = self._ready.get(key)
                while ready:
                    sb = ready.popleft()
                    if not sb.dead:
                        self._in_use.add(sb)
                        self._refill(key)
                        sb.warm_start = True  # for the run's trace and metrics (warm-pool hit rate)
                        return sb
                    self._live -= 1
                    self._spawn(self._in_thread(sb.kill))
                if self._live < self.max_containers:
                    self._live += 1
                    break
                victim = self._pop_idle_other(key)  # make room: idle warm containers of other images
                if victim is not None:
                    self._live -= 1
                    self._spawn(self._in_thread(victim.kill))
                    continue
                held = next((sb for sb in (r() for r in self._reclaimers) if sb is not None), None)
                if held is not None:  # a container a user keeps for reuse: destroyed, then its room is ours
                    self._in_use.discard(held)
                    held.dead = True
                    self._spawn(self._destroy(held))
                await cond.wait()
        try:
            sb = await self._in_thread(self.create, image, limits, task, await self.network_for(limits))
        except BaseException:
            async with cond:
                self._live -= 1
                cond.notify_all()
            raise
        self._in_use.add(sb)
        self._refill(key)
        sb.warm_start = False
        return sb

    def _pop_idle_other(self, key):
        for k, q in self._ready.items():
            if k != key and q:
                return q.popleft()
        return None

    async def release(self, sb: ServedSandbox):
        """Destroys the sandbox (never reused; removal goes on in the background) and lets the pool refill."""
        self._in_use.discard(sb)
        sb.dead = True
        self._spawn(self._destroy(sb))

    async def _destroy(self, sb: ServedSandbox):
        try:
            await self._in_thread(sb.kill)
        finally:
            async with self._condition():
                self._live -= 1
                self._condition().notify_all()
            self._refill(sb.pool_key)

    def sandbox(self, image: str, limits: SandboxSpec = SandboxSpec(), task: str = "pool"):
        return pooled(self, image, limits, task)

    def _refill(self, key):
        if self._closed or self.warm <= 0:
            return
        ready = self._ready.setdefault(key, deque())
        pending = self._refilling
        target = self.warm if self._demand is None else min(self.warm, self._demand)
        if self._image_demand is not None:
            target = min(target, self._image_demand.get(key[0], 0))
        missing = target - len(ready) - pending.get(key, 0)
        for _ in range(max(0, missing)):
            if self._live >= self.max_containers:
                return
            self._live += 1
            pending[key] = pending.get(key, 0) + 1
            self._spawn(self._create_warm(key))

    async def _create_warm(self, key):
        image, limits = key
        sb = None
        try:
            sb = await self._in_thread(self.create, image, limits, "pool", await self.network_for(limits))
        except Exception:
            pass  # a warm container is an optimisation: acquire() creates one cold if needed
        async with self._condition():
            self._refilling[key] -= 1
            if sb is None or self._closed:
                self._live -= 1
                if sb is not None:
                    self._spawn(self._in_thread(sb.kill))
            else:
                self._ready.setdefault(key, deque()).append(sb)
            self._condition().notify_all()

    def _spawn(self, coro):
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self):
        """Destroys every sandbox of this pool (warm and in use)."""
        self._closed = True
        while self._tasks:  # background removals and refills, including any they spawn meanwhile
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        victims = [sb for q in self._ready.values() for sb in q] + list(self._in_use)
        self._ready.clear()
        self._in_use.clear()
        await asyncio.gather(*(self._in_thread(sb.kill) for sb in victims))
        await self._in_thread(self.prune_pool)  # containers, then the network
        _at_exit.pop(self.pool_id, None)
        self._engine.shutdown(wait=True)  # its threads are idle now: none outlives the pool

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()
