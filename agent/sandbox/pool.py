"""The warm pool: `warm` started sandboxes per (image, limits) ready to hand out, at most `max_containers` at
once, each used once and destroyed; close() removes every container (and the network) the pool made."""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional

from agent.sandbox.backends import Backend
from agent.sandbox.cleanup import prune, prune_at_exit
from agent.sandbox.container import SandboxSpec, create_sandbox
from agent.sandbox.contract import pooled
from agent.sandbox.network import create_network
from agent.sandbox.served import ServedSandbox


class DockerPool:
    """The Docker backend's SandboxPool (agent/sandbox/contract.py). Keeps `warm` started sandboxes per
    (image, limits) ready; acquire() takes one in milliseconds, release() destroys it and the pool refills
    in the background. At most `max_containers` exist at once (warm + in use)."""

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
        self._reclaimers: list[Callable[[], Optional[ServedSandbox]]] = []
        # Engine calls (create+start, remove) block for hundreds of ms each and the engine runs many at
        # once: on asyncio's default executor (cores + 4 threads) they queued behind each other, so the pool
        # could not keep `max_containers` busy (issue 25). One thread per container that can exist.
        self._engine = ThreadPoolExecutor(
            max_workers=self.max_containers + max(warm, 0) + 2, thread_name_prefix="sandbox-engine"
        )
        prune_at_exit(self.pool_id)

    def add_reclaimer(self, take_idle: Callable[[], Optional[ServedSandbox]]):
        """`take_idle()` gives up one acquired sandbox that its user keeps idle for reuse (or None): when the
        pool is full, acquire() destroys such a one rather than wait for a release that may never come."""
        self._reclaimers.append(take_idle)

    def expect(self, acquires: int):
        """How many more acquire() calls will come (the runner knows: an agent and a grading container per
        attempt). Warm containers beyond that are never made: each one costs a create and a destroy of engine
        time that nothing uses (at 10 attempts of concurrency 8, one in three containers was such a one)."""
        self._demand = max(0, acquires)

    def _in_thread(self, fn, *args):
        return asyncio.get_running_loop().run_in_executor(self._engine, functools.partial(fn, *args))

    async def network_for(self, limits: SandboxSpec) -> Optional[str]:
        """The pool's own network, made on first use by a networked sandbox; None for the others."""
        if not limits.network:
            return None
        if self._network is None:
            self._network = asyncio.ensure_future(
                asyncio.to_thread(create_network, self.run_id, self.pool_id)
            )
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
            sb = await self._in_thread(
                create_sandbox, image, limits, self.run_id, task, self.pool_id, await self.network_for(limits)
            )
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
            sb = await self._in_thread(
                create_sandbox,
                image,
                limits,
                self.run_id,
                "pool",
                self.pool_id,
                await self.network_for(limits),
            )
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
        """Destroys every container of this pool (warm and in use)."""
        self._closed = True
        while self._tasks:  # background removals and refills, including any they spawn meanwhile
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        victims = [sb for q in self._ready.values() for sb in q] + list(self._in_use)
        self._ready.clear()
        self._in_use.clear()
        await asyncio.gather(*(self._in_thread(sb.kill) for sb in victims))
        await self._in_thread(functools.partial(prune, pool=self.pool_id))  # containers, then the network
        self._engine.shutdown(wait=True)  # its threads are idle now: none outlives the pool

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()


BACKEND = Backend("docker", pool=lambda options: DockerPool)  # agent/sandbox/backends.py
