"""The pool over agent-sandbox (K8sSandboxPool: claims, connections, warm sandboxes, close), and what
`eval --sandbox k8s` needs from it (k8s_images, k8s_pool: the backend's, __init__.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import subprocess
import time
import uuid
from collections import deque
from datetime import datetime, timedelta, timezone
from typing import Callable, Optional

from agent.sandbox.backends.k8s.api import K8sApi
from agent.sandbox.backends.k8s.manifests import (
    EXTENSIONS_API,
    SERVER_PORT,
    render_claim,
    render_template,
    render_warm_pool,
)
from agent.sandbox.backends.k8s.sandbox import K8sPod, kubectl_exec
from agent.sandbox.contract import SandboxSpec, pooled
from agent.sandbox.labels import LABEL_POOL, LABEL_RUN, content_hash
from agent.sandbox.served import ServedSandbox
from agent.sandbox.transport import SandboxDied
from results.errors import InfraError, UserError


class K8sSandboxPool:
    """The SandboxPool contract over agent-sandbox: acquire() hands out a fresh claimed sandbox (from a
    client-side queue of `warm` pre-claimed ones per image and limits), release() deletes it."""

    def __init__(
        self,
        run_id: Optional[str] = None,
        warm: int = 2,
        max_containers: int = 8,
        *,
        api: Optional[K8sApi] = None,
        images: Optional[dict[str, str]] = None,
        runtime_class: Optional[str] = None,
        ttl: float = 3 * 3600,
        connect: str = "auto",
        exec_argv: Callable[[str, str], list[str]] = kubectl_exec,
        claim_timeout: float = 300,
    ):
        if connect not in ("auto", "pod-ip", "exec"):
            raise UserError(f"k8s connect mode {connect!r}: use auto, pod-ip or exec")
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.pool_id = uuid.uuid4().hex[:12]
        self.api = api or K8sApi.from_environment()
        self.images = dict(images or {})  # local image id -> the reference the cluster pulls
        self.runtime_class, self.ttl, self.connect = runtime_class, ttl, connect
        self.exec_argv, self.claim_timeout = exec_argv, claim_timeout
        self.warm = warm
        self.token = secrets.token_hex(16)
        self.labels = {LABEL_RUN: _label_value(self.run_id), LABEL_POOL: self.pool_id}
        self._slots = asyncio.Semaphore(max(1, max_containers))
        self._pools: dict[tuple, str] = {}  # (image, limits) -> warm pool name
        self._pools_lock = asyncio.Lock()
        self._ready: dict[tuple, deque] = {}
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        self._pod_ip_ok: Optional[bool] = None if connect == "auto" else connect == "pod-ip"

    # objects ----------------------------------------------------------------------
    async def _warm_pool(self, image: str, limits: SandboxSpec) -> str:
        key = (image, limits)
        async with self._pools_lock:
            if key not in self._pools:
                ref = self.images.get(image, image)
                name = f"harness-{self.pool_id[:8]}-{content_hash(ref, repr(limits))[:8]}"
                tpl = render_template(
                    name, self.api.namespace, ref, limits, self.token, self.labels, self.runtime_class
                )
                await asyncio.to_thread(self.api.create, EXTENSIONS_API, "sandboxtemplates", tpl)
                pool = render_warm_pool(name, self.api.namespace, name, self.warm, self.labels)
                await asyncio.to_thread(self.api.create, EXTENSIONS_API, "sandboxwarmpools", pool)
                self._pools[key] = name
            return self._pools[key]

    async def _claim(self, image: str, limits: SandboxSpec) -> ServedSandbox:
        pool = await self._warm_pool(image, limits)
        name = f"{pool}-{secrets.token_hex(4)}"
        body = render_claim(
            name,
            self.api.namespace,
            pool,
            datetime.now(timezone.utc) + timedelta(seconds=self.ttl),
            self.labels,
        )
        await asyncio.to_thread(self.api.create, EXTENSIONS_API, "sandboxclaims", body)
        try:
            pod, ip = await self._wait_claimed(name)
            sock, helper = await asyncio.to_thread(self._connect, pod, ip)
            host = K8sPod(
                on_kill=lambda: self.api.delete(EXTENSIONS_API, "sandboxclaims", name),
                pod_status=lambda: self.api.pod(pod),
                helper=helper,
            )
            sb = ServedSandbox(sock, host, name=name, image=image, limits=limits)
            await asyncio.to_thread(sb.wait_ready)
            return sb
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.api.delete, EXTENSIONS_API, "sandboxclaims", name)
            raise

    async def _wait_claimed(self, claim: str) -> tuple[str, str]:
        """The claimed sandbox's pod name and IP, once the controller has bound one."""
        end = time.monotonic() + self.claim_timeout
        delay = 0.05
        while time.monotonic() < end:
            obj = await asyncio.to_thread(self.api.get, EXTENSIONS_API, "sandboxclaims", claim) or {}
            sb = (obj.get("status") or {}).get("sandbox") or {}
            if sb.get("name") and sb.get("podIPs"):
                return sb["name"], sb["podIPs"][0]
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        raise InfraError(f"sandbox claim {claim} was not bound within {self.claim_timeout:.0f}s")

    def _connect(self, pod: str, ip: str) -> tuple[socket.socket, Optional[subprocess.Popen]]:
        if self._pod_ip_ok is not False:
            end = time.monotonic() + 15
            while True:
                try:
                    sock = socket.create_connection((ip, SERVER_PORT), timeout=5)
                    sock.sendall(self.token.encode() + b"\n")
                    sock.settimeout(None)
                    self._pod_ip_ok = True
                    return sock, None
                except ConnectionRefusedError:  # reachable, not listening yet
                    if time.monotonic() > end:
                        raise SandboxDied(f"pod {pod}: nothing listens on {ip}:{SERVER_PORT}") from None
                    time.sleep(0.1)
                except OSError as e:
                    if self._pod_ip_ok:  # reachable before: this pod is the problem
                        raise SandboxDied(f"pod {pod} at {ip}:{SERVER_PORT}: {e}") from None
                    self._pod_ip_ok = False  # pod IPs are not routable from here: exec streams from now on
                    break
        mine, theirs = socket.socketpair()
        helper = subprocess.Popen(
            self.exec_argv(self.api.namespace, pod),
            stdin=theirs,
            stdout=theirs,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        theirs.close()
        return mine, helper

    # the SandboxPool contract (agent/sandbox/contract.py) --------------------------------------------
    async def acquire(
        self, image: str, limits: SandboxSpec = SandboxSpec(), task: str = "pool"
    ) -> ServedSandbox:
        if self._closed:
            raise InfraError("the k8s sandbox pool is closed")
        await self._slots.acquire()
        try:
            key = (image, limits)
            ready = self._ready.setdefault(key, deque())
            while ready:
                sb = ready.popleft()
                if not sb.dead:
                    self._refill(key)
                    return sb
            sb = await self._claim(image, limits)
            self._refill(key)
            return sb
        except BaseException:
            self._slots.release()
            raise

    async def release(self, sb: ServedSandbox):
        sb.dead = True
        self._slots.release()
        self._spawn(asyncio.to_thread(sb.kill))

    def sandbox(self, image: str, limits: SandboxSpec = SandboxSpec(), task: str = "pool"):
        return pooled(self, image, limits, task)

    def expect(self, acquires: int, per_image=None):
        """Claims are made per acquire and `warm` ahead: nothing to trim (the contract's expect)."""

    def _refill(self, key):
        """Keeps up to `warm` claimed, connected sandboxes ready: a claim takes ~1-3 s on a real cluster."""
        ready = self._ready.setdefault(key, deque())
        want = self.warm - len(ready) - sum(1 for t in self._tasks if getattr(t, "harness_key", None) == key)
        for _ in range(max(0, want)):
            t = self._spawn(self._prefetch(key))
            t.harness_key = key

    async def _prefetch(self, key):
        try:
            sb = await self._claim(*key)
        except Exception:
            return
        if self._closed:
            await asyncio.to_thread(sb.kill)
        else:
            self._ready.setdefault(key, deque()).append(sb)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self):
        """Deletes every claim, warm pool and template this pool made."""
        self._closed = True
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        for q in self._ready.values():
            for sb in q:
                await asyncio.to_thread(sb.kill)
        self._ready.clear()
        selector = f"{LABEL_POOL}={self.pool_id}"
        for plural in ("sandboxclaims", "sandboxwarmpools", "sandboxtemplates"):
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.api.delete_all, EXTENSIONS_API, plural, selector)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()


def _label_value(s: str) -> str:
    """A valid label value (63 characters of [A-Za-z0-9._-], alphanumeric at both ends)."""
    v = "".join(c if c.isalnum() or c in "._-" else "-" for c in s)[:63].strip("._-")
    return v or "x"


# -- what `eval --sandbox k8s` needs (BACKEND in __init__.py) -------------------------------------------


def k8s_images(tasks: list, options) -> dict[str, str]:
    """task id -> the image the pods run: the base image, pushed to a registry the cluster pulls from (the
    runner refuses tasks whose kind gives them an image of their own first)."""
    image = options.image or os.environ.get("HARNESS_K8S_IMAGE")
    if not image:
        raise UserError(
            "--sandbox k8s needs the sandbox image in a registry the cluster can pull: build it "
            "(`harness images build`), push it, and pass --k8s-image REGISTRY/IMAGE:TAG"
        )
    return {t.id: image for t in tasks}


def k8s_pool(options) -> Callable[..., K8sSandboxPool]:
    """A SandboxPool-compatible factory for the runner, with the cluster's settings bound (K8sOptions)."""
    import functools

    api = K8sApi.from_environment(options.namespace)
    return functools.partial(
        K8sSandboxPool, api=api, runtime_class=options.runtime_class, connect=options.connect
    )
