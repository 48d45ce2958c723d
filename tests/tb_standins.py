"""Offline stand-ins for the base images of the Terminal-Bench corpus (tests/fixtures/terminal-bench), and the
corpus's task images built on them from each task's own environment/Dockerfile.

No registry answers here, so `FROM ubuntu:24.04` / `FROM python:3.13-slim-bookworm` get local stand-ins: one
Debian trixie minbase root (debootstrap; trixie has Python 3.13), `docker import`-ed, then a short Dockerfile
per stand-in, tagged with the name the task Dockerfiles ask for. The standard TB verifier
(`curl .../uv/install.sh | sh; source $HOME/.local/bin/env; uvx -p 3.13 -w ... pytest ...`) must work with the
network off, so each stand-in carries what it would download (how they differ from the real images:
STANDIN_DIFFERENCES). Builds reach Debian and PyPI; runs reach nothing. Everything is cached by recipe hash
(tags harness-tb/...:<hash>), so a second run builds nothing.

    .venv/bin/python -m tests.tb_standins        # build what is missing, print the seconds each step took
"""

from __future__ import annotations

import io
import json
import re
import sys
import time
from pathlib import Path

import docker.errors

from agent.sandbox import PATH, content_hash
from agent.sandbox.backends.docker.client import docker_client
from agent.sandbox.backends.docker.images import debootstrap_import, find_image
from results.errors import UserError

CORPUS = Path(__file__).resolve().parent / "fixtures" / "terminal-bench"
UV_VERSION = "0.9.5"  # the version the TB 2.x verifiers install
GCC_MAJOR = "14"  # trixie's gcc, for which GCC_SPECS is written
PIP_VERSION = "25.2"  # the python:3.13-slim-bookworm stand-in's pip (in /usr/local, like the real image's)
ROOT_REPO = "harness-tb/trixie"
# python3 for uvx -p 3.13 (python-build-standalone downloads need GitHub); curl, as test.sh apt-installs it.
ROOT_PACKAGES = [
    "python3",
    "python3-pip",
    "python3-venv",
    "python-is-python3",
    "curl",
    "ca-certificates",
    "procps",
]
RECIPE_VERSION = "1"

STANDIN_DIFFERENCES = {
    "python:3.13-slim-bookworm": "Debian trixie (not bookworm) with Debian's python3.13 at /usr/bin (not a "
    "source build in /usr/local), pip without the EXTERNALLY-MANAGED marker, and curl preinstalled",
    "ubuntu:24.04": "Debian trixie, not Ubuntu noble; has python3.13 (the real image has no Python) and curl",
}
# Every stand-in also has: uv/uvx 0.9.5 in /root/.local/bin with an `env` script like the installer's
# (so test.sh's `curl astral.sh | sh` may fail offline and `source $HOME/.local/bin/env` still works),
# UV_OFFLINE=1 and UV_PYTHON_DOWNLOADS=never in its ENV, uv's cache pre-seeded with the corpus verifiers'
# `-w` requirements,
# the .debs of the corpus's apt_preseed packages (what its oracles apt-get install) in /var/cache/apt/archives
# with apt's lists kept, so `apt-get update` fails offline and `apt-get install` still works.


def manifest() -> dict:
    return json.loads((CORPUS / "manifest.json").read_text())


def verifier_requirements(test_sh: str) -> list[list[str]]:
    """The `-w REQ` sets of each `uvx` command in a test.sh (line continuations joined)."""
    text = test_sh.replace("\\\n", " ")
    sets = []
    for line in text.splitlines():
        words = line.split()
        if "uvx" in words:
            reqs = [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-w", "--with")]
            sets.append(reqs)
    return sets


def all_requirement_sets() -> list[list[str]]:
    sets = []
    for name in manifest()["tasks"]:
        test_sh = CORPUS / name / "tests" / "test.sh"
        for reqs in verifier_requirements(test_sh.read_text()):
            if reqs not in sets:
                sets.append(reqs)
    return sorted(sets)


def _root_tag() -> str:
    return f"{ROOT_REPO}:{content_hash(RECIPE_VERSION, 'trixie', *ROOT_PACKAGES)}"


def standin_dockerfile(name: str, root: str) -> str:
    seeds = "".join(
        f"    && uvx -p 3.13 {' '.join('-w ' + r for r in reqs)} pytest --version \\\n"
        for reqs in all_requirement_sets()
    )
    preseed = " ".join(manifest().get("apt_preseed", []))
    # python:*: pip in /usr/local, as in the real image (Debian's own pip, packaging and wheel have no RECORD
    # files, so a task's `pip install --upgrade pip` could not replace them)
    unmanaged = (
        "RUN rm -f /usr/lib/python3*/EXTERNALLY-MANAGED \\\n"
        f"    && python3 -m pip install --no-cache-dir --ignore-installed pip=={PIP_VERSION} \\\n"
        "    && apt-get purge -y -q python3-pip python3-wheel && apt-get autoremove -y -q\n"
        if name.startswith("python:")
        else ""
    )
    return f"""FROM {root}
ENV PATH={PATH} LANG=C.UTF-8 HOME=/root
COPY extra-ca/ /usr/local/share/ca-certificates/
RUN update-ca-certificates >/dev/null
RUN apt-get update
{unmanaged}RUN apt-get install -y --download-only {preseed}
RUN mkdir -p /tmp/uvwheel /root/.local/bin && cd /tmp/uvwheel \\
    && python3 -m pip download --no-deps --only-binary=:all: uv=={UV_VERSION} \\
    && python3 -c "import zipfile,glob; zipfile.ZipFile(glob.glob('uv-*.whl')[0]).extractall('x')" \\
    && cd x/uv-{UV_VERSION}.data/scripts && install -m 0755 uv uvx /root/.local/bin/ && rm -rf /tmp/uvwheel
COPY uv-env /root/.local/bin/env
COPY gcc-specs /usr/lib/gcc/x86_64-linux-gnu/{GCC_MAJOR}/specs
RUN export PATH=/root/.local/bin:$PATH UV_PYTHON_DOWNLOADS=never \\
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt && uv --version \\
{seeds}    && true
ENV UV_OFFLINE=1 UV_PYTHON_DOWNLOADS=never
LABEL harness.tb-standin={json.dumps(name)}
CMD ["/bin/bash"]
"""


# What uv's installer writes to ~/.local/bin/env: put that folder on PATH once.
UV_ENV_SCRIPT = """#!/bin/sh
case ":${PATH}:" in
    *:"$HOME/.local/bin":*) ;;
    *) export PATH="$HOME/.local/bin:$PATH" ;;
esac
"""


# gcc 14 (trixie) made C89 leftovers errors that gcc 12 (bookworm) and 13 (noble) only warn about (an
# implicit declaration of gets(), say); when a task installs gcc, these specs keep them warnings.
GCC_SPECS = (
    "*cc1:\n+ "
    + " ".join(
        "-Wno-error=" + w
        for w in (
            "implicit-function-declaration",
            "implicit-int",
            "int-conversion",
            "incompatible-pointer-types",
        )
    )
    + "\n\n"
)


def build_context() -> dict[str, bytes]:
    """The stand-ins' build context: uv's env script, and this machine's own CA certificates (a
    TLS-intercepting proxy's): builds reach PyPI through it, and so do the task images' own `RUN pip install`
    steps, so the stand-ins keep trusting them."""
    folder = Path("/usr/local/share/ca-certificates")
    cas = {f"extra-ca/{p.name}": p.read_bytes() for p in sorted(folder.glob("*.crt"))}
    files = {"uv-env": UV_ENV_SCRIPT.encode(), "gcc-specs": GCC_SPECS.encode()}
    return {**(cas or {"extra-ca/.none": b""}), **files}


def _build(dockerfile: str, tag: str, context: dict[str, bytes] | None = None, path: str | None = None):
    client = docker_client()
    try:
        if path:
            img, _ = client.images.build(path=path, tag=tag, rm=True, forcerm=True)
        else:
            import tarfile

            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                for fname, data in {**(context or {}), "Dockerfile": dockerfile.encode()}.items():
                    info = tarfile.TarInfo(fname)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
            buf.seek(0)
            img, _ = client.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True, forcerm=True)
    except docker.errors.BuildError as e:
        last = [str(x.get("stream", x.get("error", ""))).strip() for x in e.build_log][-6:]
        raise UserError(f"building {tag} failed: {e.msg}; last output: {' | '.join(last)[-600:]}") from None
    return img


def _tag_as(img, name: str, log) -> None:
    """Gives the stand-in (or task image) the name the task asks for, unless a foreign image has it."""
    current = find_image(name)
    if current is not None and current.id == img.id:
        return
    if current is not None and not any(k.startswith("harness.tb") for k in (current.labels or {})):
        log(f"{name} is already on this machine and is not ours: kept (the corpus runs on it as it is)")
        return
    repo, _, tag = name.rpartition(":")
    img.tag(repo, tag)


def ensure_standins(log=print) -> dict[str, float]:
    """Builds the trixie root and every stand-in the corpus names (only what is missing). Returns seconds."""
    seconds = {}
    root = _root_tag()
    if find_image(root) is None:
        t0 = time.monotonic()
        debootstrap_import(
            root,
            "trixie",
            ROOT_PACKAGES,
            [f"ENV PATH={PATH} LANG=C.UTF-8", 'CMD ["/bin/bash"]', "LABEL harness.tb-standin=root"],
            log,
        )
        seconds["debootstrap trixie"] = time.monotonic() - t0
    for name in sorted({t["base_image"] for t in manifest()["tasks"].values()}):
        dockerfile = standin_dockerfile(name, root)
        cas = build_context()
        tag = f"harness-tb/{re.sub(r'[^a-z0-9]+', '-', name)}:{content_hash(dockerfile, *cas, *cas.values())}"
        img = find_image(tag)
        if img is None:
            t0 = time.monotonic()
            log(f"building the stand-in for {name} ...")
            img = _build(dockerfile, tag, cas)
            seconds[f"stand-in {name}"] = time.monotonic() - t0
        _tag_as(img, name, log)
    return seconds


def ensure_task_images(log=print) -> dict[str, float]:
    """Builds each corpus task's environment/Dockerfile on the stand-ins and tags it with the task's
    docker_image (what Harbor would pull), cached by the content of environment/ and the base's id."""
    seconds = {}
    for name, entry in manifest()["tasks"].items():
        image_name = entry.get("docker_image")
        if not image_name:
            continue
        env_dir = CORPUS / name / "environment"
        files = sorted(p for p in env_dir.rglob("*") if p.is_file())
        base = find_image(entry["base_image"])
        if base is None:
            raise UserError(f"{entry['base_image']} is missing: run ensure_standins first")
        key = content_hash(
            base.id, *(str(p.relative_to(env_dir)) for p in files), *(p.read_bytes() for p in files)
        )
        tag = f"harness-tb/task-{name}:{key}"
        img = find_image(tag)
        if img is None:
            t0 = time.monotonic()
            log(f"building the image of {name} ...")
            img = _build("", tag, path=str(env_dir))
            seconds[f"task {name}"] = time.monotonic() - t0
        _tag_as(img, image_name, log)
    return seconds


def ensure_corpus_images(log=print) -> dict[str, float]:
    return {**ensure_standins(log), **ensure_task_images(log)}


def main() -> int:
    t0 = time.monotonic()
    seconds = ensure_corpus_images(log=lambda m: print(m, file=sys.stderr))
    for step, s in seconds.items():
        print(f"{s:7.1f}s  {step}")
    print(f"{time.monotonic() - t0:7.1f}s  total ({len(seconds)} steps built; the rest was cached)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
