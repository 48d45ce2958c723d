"""A Ctrl-C (the run's task cancelled) that lands as a sandbox's reply arrives still stops the run: the
command channel must not turn the cancellation into the reply (Python 3.11's asyncio.wait_for does)."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest

from agent.sandbox.transport import CommandChannel


def test_a_cancellation_that_meets_the_reply_is_not_lost():
    async def main():
        ours, server = socket.socketpair()
        channel = CommandChannel(ours, "test", multiplexed=False, on_unresponsive=lambda: None)
        try:
            task = asyncio.create_task(channel.request({"op": "exec"}, host_timeout=30))
            for _ in range(5):
                await asyncio.sleep(0)  # the request is sent and the task waits for its reply
            req = json.loads(server.recv(65536).decode().splitlines()[0])
            server.sendall((json.dumps({"id": req["id"], "rc": 0}) + "\n").encode())
            time.sleep(0.3)  # the loop is busy: the reply's callback is queued before the cancel is seen
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            channel.close()
            server.close()

    asyncio.run(main())
