"""The docker CLI backend (agent/sandbox/backends/docker_cli/) beyond the contract suite: the same hardening
as the Docker SDK backend, its own prune by label, its network, and the user's errors."""

from __future__ import annotations

import uuid

import docker
import pytest

from agent.sandbox import LABEL_RUN, SandboxSpec, sandbox_backend
from agent.sandbox.backends.docker.pool import DockerPool
from agent.sandbox.backends.docker_cli.cleanup import prune
from agent.sandbox.backends.docker_cli.cli import DockerCli
from agent.sandbox.backends.docker_cli.pool import DockerCliPool
from results.errors import UserError
from tests.conftest import run

SMALL = SandboxSpec(memory_mb=256, pids=64, workspace_mb=32, tmp_mb=16)


def containers(run_id: str) -> list[dict]:
    return docker.from_env().api.containers(all=True, filters={"label": f"{LABEL_RUN}={run_id}"})


def _settings(container_id: str) -> dict:
    """What hardens a container, as the engine reports it (names and ids left out)."""
    attrs = docker.from_env().api.inspect_container(container_id)
    host, config = attrs["HostConfig"], attrs["Config"]
    keys = (
        "CapAdd",
        "CapDrop",
        "SecurityOpt",
        "NetworkMode",
        "Memory",
        "MemorySwap",
        "NanoCpus",
        "PidsLimit",
        "ReadonlyRootfs",
        "Tmpfs",
        "Init",
        "Runtime",
        "Privileged",
    )
    out = {k: host.get(k) for k in keys}
    out["CapAdd"] = sorted(c.removeprefix("CAP_") for c in out["CapAdd"] or [])
    out["CapDrop"] = sorted(out["CapDrop"] or [])
    out["Ulimits"] = sorted((u["Name"], u["Soft"], u["Hard"]) for u in host.get("Ulimits") or [])
    out["LogConfig"] = host["LogConfig"]["Type"]
    out["User"], out["WorkingDir"], out["Cmd"] = config["User"], config["WorkingDir"], config["Cmd"]
    out["Env"] = sorted(e.split("=", 1)[0] for e in config["Env"])
    out["Labels"] = sorted(config["Labels"])
    out["Stdin"] = (config["OpenStdin"], config["Tty"])
    return out


def test_the_same_hardening_as_the_docker_backend(image):
    """Every setting that hardens a sandbox is the same whether the SDK or the CLI made the container."""

    async def settings(pool):
        async with pool:
            async with pool.sandbox(image, SMALL, task="parity") as sb:
                return _settings(sb.id)  # the container's id (SDK) or name (CLI)

    sdk = run(settings(DockerPool(run_id=f"parity-{uuid.uuid4().hex[:6]}", warm=0)))
    cli = run(settings(DockerCliPool(run_id=f"parity-{uuid.uuid4().hex[:6]}", warm=0)))
    assert cli == sdk
    assert sdk["CapDrop"] == ["ALL"] and sdk["CapAdd"] == ["DAC_OVERRIDE", "KILL", "SETGID", "SETUID"]
    assert sdk["NetworkMode"] == "none" and sdk["ReadonlyRootfs"] and sdk["Memory"] == sdk["MemorySwap"]


def test_a_memory_bomb_is_killed_and_reported_and_a_killed_sandbox_is_gone(image):
    run_id = f"cli-oom-{uuid.uuid4().hex[:6]}"

    async def go():
        async with DockerCliPool(run_id=run_id, warm=0) as pool:
            async with pool.sandbox(image, SMALL) as sb:
                bomb = await sb.exec("python3 -c \"x=[]\nwhile True: x.append(' ' * 10**6)\"", timeout=60)
                after = await sb.exec("echo alive", 10)
                sb.kill()
                return bomb, after, containers(run_id)

    bomb, after, left = run(go())
    assert bomb.exit_code != 0 and bomb.oom, bomb
    assert after.stdout == "alive\n"  # the command died, not the sandbox
    assert left == []  # kill() removed the container at once
    assert containers(run_id) == []


def test_prune_removes_what_a_pool_left_by_its_labels(image):
    run_id = f"cli-prune-{uuid.uuid4().hex[:6]}"
    cli = DockerCli()

    async def leave():
        pool = DockerCliPool(run_id=run_id, warm=0)
        await pool.acquire(image, SMALL)  # never released or closed: a leftover
        await pool.acquire(image, SandboxSpec(memory_mb=256, pids=64, network=True))  # and a network

    run(leave())
    assert len(containers(run_id)) == 2
    nets = cli.run("network", "ls", "--quiet", "--filter", f"label={LABEL_RUN}={run_id}").split()
    assert len(nets) == 1
    assert prune(cli, run_id, orphans_only=True) == 0  # its process (this one) lives: kept
    assert prune(cli, run_id) == 2
    assert containers(run_id) == []
    assert cli.run("network", "ls", "--quiet", "--filter", f"label={LABEL_RUN}={run_id}").split() == []


def test_a_networked_pool_gets_its_own_bridge_without_traffic_between_its_containers(image):
    run_id = f"cli-net-{uuid.uuid4().hex[:6]}"

    async def go():
        async with DockerCliPool(run_id=run_id, warm=0) as pool:
            async with pool.sandbox(image, SandboxSpec(memory_mb=256, pids=64, network=True)) as sb:
                mode = docker.from_env().api.inspect_container(sb.id)["HostConfig"]["NetworkMode"]
                net = docker.from_env().api.inspect_network(mode)
                ifaces = await sb.exec("ls /sys/class/net", 10)
                return net, ifaces

    net, ifaces = run(go())
    assert net["Options"]["com.docker.network.bridge.enable_icc"] == "false"
    assert net["Labels"][LABEL_RUN] == run_id and "eth0" in ifaces.stdout.split()
    assert docker.from_env().api.networks(filters={"label": f"{LABEL_RUN}={run_id}"}) == []  # closed


def test_a_missing_image_or_cli_is_the_users_to_fix(image):
    async def go():
        async with DockerCliPool(warm=0) as pool:
            async with pool.sandbox("harness/no-such-image:0", SMALL):
                pass

    with pytest.raises(UserError, match="image harness/no-such-image:0 not found"):
        run(go())
    with pytest.raises(UserError, match="--docker-cli-binary"):
        sandbox_backend("docker-cli").pool({"binary": "no-such-docker"})(warm=0)
    with pytest.raises(UserError, match="no static helper"):
        from agent.sandbox import NativeSpec

        async def native():
            async with DockerCliPool(warm=0) as pool:
                async with pool.sandbox(image, SandboxSpec(native=NativeSpec())):
                    pass

        run(native())
