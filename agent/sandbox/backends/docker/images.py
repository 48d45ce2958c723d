"""The Docker backend's images (the "own_images" capability): the sandbox images, built on this host's engine
without needing a registry and cached by content hash.

The base image: where a registry answers, a Dockerfile on python:3.11-slim; otherwise a Debian
bookworm root made by debootstrap and `docker import`-ed. Both have python3 with pytest, numpy
and pandas, git, procps, a dedicated user 10001 and /workspace owned by it. The tag carries the
recipe's hash, so the image is rebuilt only when the recipe changes.
A task may bring environment/Dockerfile `FROM harness/base`; it is built and cached the same way.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Optional

import docker.errors

from agent.sandbox.backends.docker.client import docker_client
from agent.sandbox.contract import AGENT_UID, PATH
from agent.sandbox.labels import content_hash
from results.errors import UserError

BASE_REPO = "harness/base"
DEBIAN_PACKAGES = [
    "python3",
    "python3-pytest",
    "python3-numpy",
    "python3-pandas",
    "git",
    "procps",
    "ca-certificates",
    "bash",
    "coreutils",
    "findutils",
    "grep",
    "sed",
    "gawk",
    "tar",
    "gzip",
    "diffutils",
    "patch",
    "file",
    "bc",
    "jq",
]
REGISTRY_DOCKERFILE = f"""FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends git procps file bc jq patch \\
    && rm -rf /var/lib/apt/lists/* && ln -sf /usr/local/bin/python3 /usr/bin/python3 \\
    && pip install --no-cache-dir pytest numpy pandas
RUN groupadd -g {AGENT_UID} sandbox && useradd -u {AGENT_UID} -g {AGENT_UID} -d /tmp -s /bin/bash sandbox \\
    && mkdir -p /workspace /grader && chown {AGENT_UID}:{AGENT_UID} /workspace
WORKDIR /workspace
"""
RECIPE_VERSION = "1"


def base_recipe_hash() -> str:
    return content_hash(RECIPE_VERSION, " ".join(DEBIAN_PACKAGES), REGISTRY_DOCKERFILE, str(AGENT_UID))


def base_tag() -> str:
    return f"{BASE_REPO}:{base_recipe_hash()}"


def find_image(tag: str):
    try:
        return docker_client().images.get(tag)
    except docker.errors.ImageNotFound:
        return None


def ensure_base_image(log=print) -> str:
    """Returns the base image's id, building it first if this recipe was never built here."""
    tag = base_tag()
    img = find_image(tag)
    if img is None:
        img = _build_base(tag, log)
    # `FROM harness/base` in task Dockerfiles resolves to the current recipe.
    if f"{BASE_REPO}:latest" not in img.tags:
        img.tag(BASE_REPO, "latest")
    return img.id


def _build_base(tag: str, log) -> "docker.models.images.Image":
    client = docker_client()
    labels = {"harness.recipe": base_recipe_hash()}
    try:  # the ordinary way, where a registry answers
        client.images.pull("python", tag="3.11-slim")
        log("building the base image from python:3.11-slim ...")
        img, _ = client.images.build(
            fileobj=io.BytesIO(REGISTRY_DOCKERFILE.encode()), tag=tag, labels=labels, rm=True
        )
        return img
    except docker.errors.APIError:
        pass
    if os.geteuid() != 0 or not shutil.which("debootstrap"):
        raise UserError(
            "no container registry answers and the base image needs debootstrap as root: "
            "run `make setup` as root (installs debootstrap), or pull python:3.11-slim"
        )
    log("no registry: building the base image with debootstrap (about a minute) ...")
    with tempfile.TemporaryDirectory(prefix="harness-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        cmd = [
            "debootstrap",
            "--variant=minbase",
            "--include=" + ",".join(DEBIAN_PACKAGES),
            "bookworm",
            str(root),
            _debian_mirror(),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise UserError(
                f"debootstrap failed (exit {proc.returncode}): "
                f"{(proc.stderr or proc.stdout).strip().splitlines()[-1:]}"
            )
        _add_sandbox_user(root)
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
            shutil.rmtree(root / junk, ignore_errors=True)
        changes = [
            f"LABEL harness.recipe={labels['harness.recipe']}",
            "WORKDIR /workspace",
            f"ENV PATH={PATH} LANG=C.UTF-8",
            'CMD ["/bin/bash"]',
        ]
        out = import_rootfs(root, tag, changes)
        text = out if isinstance(out, str) else json.dumps(out)
        if "error" in text.lower() and "status" not in text.lower():
            raise UserError(f"docker import of the base image failed: {text[:300]}")
    return client.images.get(tag)


def import_rootfs(root: Path, tag: str, changes: list[str]):
    """`docker import` of a root filesystem folder as `tag`, with Dockerfile-style `changes` (WORKDIR, ENV,
    CMD, LABEL): how every image of ours without a registry is made. Returns the engine's reply."""
    tar_path = root.parent / f"{root.name}.tar"
    subprocess.run(["tar", "-C", str(root), "-cf", str(tar_path), "."], check=True)
    try:
        repo, _, version = tag.partition(":")
        return docker_client().api.import_image(
            src=str(tar_path), repository=repo, tag=version, changes=changes
        )
    finally:
        tar_path.unlink(missing_ok=True)


def _debian_mirror() -> str:
    """The mirror apt already uses here (it may be the only one reachable)."""
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        try:
            for line in path.read_text().splitlines():
                words = line.split()
                if words[:1] == ["URIs:"] and "security" not in words[1]:
                    return words[1]
                if words[:1] == ["deb"] and "security" not in line:
                    return next(w for w in words[1:] if "://" in w)
        except (OSError, StopIteration):
            continue
    return "http://deb.debian.org/debian"


def _add_sandbox_user(root: Path):
    with open(root / "etc/passwd", "a") as f:
        f.write(f"sandbox:x:{AGENT_UID}:{AGENT_UID}:sandbox:/tmp:/bin/bash\n")
    with open(root / "etc/group", "a") as f:
        f.write(f"sandbox:x:{AGENT_UID}:\n")
    for d in ("workspace", "grader"):
        (root / d).mkdir(exist_ok=True)
    os.chown(root / "workspace", AGENT_UID, AGENT_UID)


def task_image(dockerfile: Optional[str], context_files: dict[str, bytes], log=print) -> str:
    """The image a task runs in: the base, or its own Dockerfile built FROM it (cached by hash)."""
    base_id = ensure_base_image(log)
    if not dockerfile:
        return base_id
    contents = [context_files[k] for k in sorted(context_files)]
    tag = f"harness/task:{content_hash(base_id, dockerfile, *sorted(context_files), *contents)}"
    img = find_image(tag)
    if img is not None:
        return img.id
    missing = _missing_bases(dockerfile)
    if missing:  # never pulled: tasks build only from images on this machine (no registry is assumed)
        raise UserError(
            f"FROM {missing[0]} is not on this machine: load or pull it first "
            f"(`docker load -i image.tar`), or build FROM {BASE_REPO}:latest"
        )
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in {**context_files, "Dockerfile": dockerfile.encode()}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    try:
        img, _ = docker_client().images.build(
            fileobj=buf,
            custom_context=True,
            tag=tag,
            rm=True,
            forcerm=True,
            buildargs={"BASE_IMAGE": base_tag()},
        )
    except docker.errors.BuildError as e:
        last = [str(x.get("stream", x.get("error", ""))).strip() for x in e.build_log][-3:]
        raise UserError(
            f"task Dockerfile does not build: {e.msg}; last output: {' | '.join(last)[:300]}"
        ) from None
    return img.id


def _missing_bases(dockerfile: str) -> list[str]:
    """FROM images of a Dockerfile that are not on this machine (not stages, scratch or ${ARG} forms)."""
    stages, missing = set(), []
    for line in dockerfile.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0].upper() == "FROM":
            args = [w for w in words[1:] if not w.startswith("--")]
            if len(args) >= 3 and args[1].upper() == "AS":
                stages.add(args[2].lower())
            base = args[0] if args else ""
            if (
                base
                and "$" not in base
                and base.lower() not in stages | {"scratch"}
                and find_image(base) is None
            ):
                missing.append(base)
    return missing


def prebuilt_image(name: str) -> str:
    """A task's docker_image, used as given: it must already be on this machine (no registry is used)."""
    img = find_image(name)
    if img is None:
        raise UserError(
            f"docker_image {name!r} is not on this machine and no registry is used here "
            "(build it, or `docker load -i` it, first)"
        )
    return img.id


def debootstrap_import(tag: str, suite: str, include: list[str], changes: list[str], log=print) -> str:
    """A Debian `suite` minbase root with `include` installed, made by debootstrap and `docker import`-ed as
    `tag` with the Dockerfile `changes` (ENV, WORKDIR, CMD...), for images built FROM it. Returns the tag."""
    if os.geteuid() != 0 or not shutil.which("debootstrap"):
        raise UserError(f"building {tag} needs debootstrap as root: run `make setup` as root")
    log(f"debootstrap {suite} for {tag} ...")
    with tempfile.TemporaryDirectory(prefix="harness-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        cmd = ["debootstrap", "--variant=minbase", *(["--include=" + ",".join(include)] if include else [])]
        proc = subprocess.run([*cmd, suite, str(root), _debian_mirror()], capture_output=True, text=True)
        if proc.returncode != 0:
            raise UserError(
                f"debootstrap {suite} failed (exit {proc.returncode}): "
                f"{(proc.stderr or proc.stdout).strip().splitlines()[-1:]}"
            )
        for junk in ("var/cache/apt/archives", "usr/share/doc", "usr/share/man"):
            shutil.rmtree(root / junk, ignore_errors=True)
        (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
        import_rootfs(root, tag, changes)
    if find_image(tag) is None:
        raise UserError(f"docker import of {tag} failed")
    return tag


MINBASE_REPO = "harness/minbase"
MINBASE_RECIPE = "debootstrap --variant=minbase bookworm; no python; WORKDIR /app; v1"


def ensure_minbase_image(log=print) -> str:
    """A Debian minbase image without any Python (for tests and benchmarks of the static helper), built with
    debootstrap like the base image and cached by recipe hash. Returns its tag."""
    tag = f"{MINBASE_REPO}:{content_hash(MINBASE_RECIPE)}"
    img = find_image(tag)
    if img is not None:
        if (
            f"{MINBASE_REPO}:latest" not in img.tags
        ):  # fixture tasks name it as docker_image = "harness/minbase:latest"
            img.tag(MINBASE_REPO, "latest")
        return tag
    if os.geteuid() != 0 or not shutil.which("debootstrap"):
        raise UserError("the Python-less test image needs debootstrap as root: run `make setup` as root")
    log("building a Python-less Debian minbase image with debootstrap ...")
    with tempfile.TemporaryDirectory(prefix="harness-minbase-") as tmp:
        root = Path(tmp) / "rootfs"
        proc = subprocess.run(
            ["debootstrap", "--variant=minbase", "bookworm", str(root), _debian_mirror()],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise UserError(
                f"debootstrap failed (exit {proc.returncode}): "
                f"{(proc.stderr or proc.stdout).strip().splitlines()[-1:]}"
            )
        if list(root.glob("usr/bin/python*")):
            raise UserError("the minbase image unexpectedly contains python")
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
            shutil.rmtree(root / junk, ignore_errors=True)
        (root / "app").mkdir(exist_ok=True)
        import_rootfs(root, tag, ["WORKDIR /app", f"ENV PATH={PATH}", 'CMD ["/bin/bash"]'])
    if find_image(tag) is None:
        raise UserError("docker import of the minbase image failed")
    return ensure_minbase_image(log)


BUSYBOX_REPO = "harness/busybox"
BUSYBOX_RECIPE = "debian busybox-static only: no libc, no python, no bash; WORKDIR /app; v1"


def ensure_busybox_image(log=print) -> str:
    """An image holding nothing but a static busybox (no libc, no Python, no bash), for tests of the static
    helper: made from Debian's busybox-static package, cached by recipe hash; also tagged :latest."""
    tag = f"{BUSYBOX_REPO}:{content_hash(BUSYBOX_RECIPE)}"
    img = find_image(tag)
    if img is not None:
        if f"{BUSYBOX_REPO}:latest" not in img.tags:
            img.tag(BUSYBOX_REPO, "latest")
        return tag
    if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        raise UserError("the busybox test image needs apt-get and dpkg-deb (a Debian machine)")
    log("building a busybox-only image from Debian's busybox-static ...")
    with tempfile.TemporaryDirectory(prefix="harness-busybox-") as tmp:
        os.chmod(tmp, 0o755)  # apt's download user must be able to write here
        proc = subprocess.run(
            ["apt-get", "download", "busybox-static"], cwd=tmp, capture_output=True, text=True
        )
        debs = list(Path(tmp).glob("busybox-static_*.deb"))
        if proc.returncode != 0 or not debs:
            raise UserError(f"apt-get download busybox-static failed: {proc.stderr.strip()[-200:]}")
        extracted, root = Path(tmp) / "x", Path(tmp) / "rootfs"
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(extracted)], check=True)
        (root / "bin").mkdir(parents=True)
        shutil.copy2(extracted / "bin" / "busybox", root / "bin" / "busybox")
        applets = subprocess.run(
            [str(root / "bin" / "busybox"), "--list"], capture_output=True, text=True, check=True
        ).stdout.split()
        for name in applets:
            if name != "busybox":
                (root / "bin" / name).symlink_to("busybox")
        for d in ("app", "tmp", "etc", "root"):
            (root / d).mkdir(exist_ok=True)
        os.chmod(root / "tmp", 0o1777)
        (root / "etc" / "passwd").write_text(
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"
        )
        (root / "etc" / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
        import_rootfs(root, tag, ["WORKDIR /app", "ENV PATH=/bin", 'CMD ["/bin/sh"]'])
    if find_image(tag) is None:
        raise UserError("docker import of the busybox image failed")
    return ensure_busybox_image(log)


def main_build(args) -> int:
    image_id = ensure_base_image()
    print(f"{base_tag()}  {image_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main_build(None))
