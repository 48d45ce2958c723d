"""What a Harbor verifier loads: a model of the paths whose content can change what `test.sh` executes,
asked of the task's PRISTINE image at grading time (never of a list of names, never of the agent's container).

A short-lived container of the image (cached per image id for this process) is probed by the static helper
(its own folder listing and file reads) and by each Python interpreter the image has on its PATH (run by
absolute path, script on stdin):
  - per interpreter: sys.path as `python3 -m pytest` sees it in the working folder ('' -> that folder), the
    standard library's folders, site/dist-packages, the user site of the verifier's user and root, the
    top-level module names it PROVIDES (pkgutil over sys.path minus the working folder, builtins, the
    top-level names of every installed distribution's RECORD/top_level.txt) with the index of the first
    sys.path entry that provides each, the namespace packages among them, and its site/usercustomize files;
  - uv's cache folders (`uvx -w ...` builds the verifier's pytest from them) and the archives they hold;
  - the shell's PATH (the image's, plus the installer folders ~/.local/bin and ~/.cargo/bin: first when
    test.sh names them, as `source $HOME/.local/bin/env` does, else last) and the programs in each folder;
  - the startup files the verifier's shell reads: $BASH_ENV / $ENV and the files test.sh sources;
  - the dynamic loader's files (/etc/ld.so.preload, ld.so.conf and its includes) and library folders;
  - the folders above /tests and the working folder, where pytest looks for its ini files and conftest.py.
An image without Python simply has no Python part. The rule over this model is tamper.loads_findings.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex

# Run by each interpreter: argv = [workdir, json {user: home}]; prints one JSON object.
PROBE_PY = r"""
import json, os, pkgutil, sys, sysconfig, site
wd, homes = sys.argv[1], json.loads(sys.argv[2])
os.chdir(wd)
path = [os.path.realpath(p or wd) for p in sys.path if not p.endswith('.zip')]
v = '%d.%d' % sys.version_info[:2]
stdlib = sorted({os.path.realpath(sysconfig.get_paths()[k]) for k in ('stdlib', 'platstdlib')})
stdlib += [p for p in path if p.endswith('lib-dynload')]
sites = [os.path.realpath(p) for p in site.getsitepackages()]
sites += [os.path.join(h, '.local', 'lib', 'python' + v, 'site-packages') for h in homes.values()]
provided, namespaces = {n: -1 for n in sys.builtin_module_names}, set()
for i, d in enumerate(path):
    if d == os.path.realpath(wd) or not os.path.isdir(d):
        continue
    for m in pkgutil.iter_modules([d]):
        provided.setdefault(m.name, i)
    for e in os.listdir(d):
        full = os.path.join(d, e)
        meta = [os.path.join(full, f) for f in ('top_level.txt', 'RECORD')]
        if e.endswith(('.dist-info', '.egg-info')):
            for f in meta:
                try:
                    lines = open(f, errors='replace').read().splitlines()
                except OSError:
                    continue
                for line in lines:
                    top = line.split(',')[0].split('/')[0]
                    name = top.split('.')[0]
                    if name.isidentifier() and not top.endswith(('.dist-info', '.data', '.pth')):
                        provided.setdefault(name, i)
        elif e.isidentifier() and os.path.isdir(full) and not any(
            os.path.exists(os.path.join(full, '__init__' + s)) for s in ('.py', '.pyc')
        ) and any(f.endswith('.py') or os.path.isdir(os.path.join(full, f)) for f in os.listdir(full)):
            if e not in provided:  # a later folder without __init__ does not make a regular package one
                namespaces.add(e)
                provided[e] = i
hooks = []
for h in ('sitecustomize', 'usercustomize'):
    for d in path + sites:
        for s in ('.py', '.pyc', '/__init__.py'):
            p = os.path.join(d, h + s)
            if os.path.exists(p):
                hooks += [p, os.path.realpath(p)]
print(json.dumps({'exe': os.path.realpath(sys.executable), 'tag': sys.implementation.cache_tag,
    'path': path, 'stdlib': stdlib, 'site': sites, 'provided': provided,
    'namespaces': sorted(namespaces), 'hooks': sorted(set(hooks))}))
"""

# Checks bytecode the agent left against the image's own source, in a pristine container: argv = [json
# [[pyc file, source path, optimize]]]; prints json {pyc file: "same" | "differs" | "no source"}.
PYC_PY = r"""
import json, marshal, os, sys
out = {}
for pyc, src, opt in json.loads(sys.argv[1]):
    if not os.path.isfile(src):
        out[pyc] = 'no source'
        continue
    try:
        code = compile(open(src, 'rb').read(), src, 'exec', dont_inherit=True, optimize=opt)
        out[pyc] = 'same' if marshal.loads(open(pyc, 'rb').read()[16:]) == code else 'differs'
    except Exception:
        out[pyc] = 'differs'
print(json.dumps(out))
"""

# What pytest itself imports (its dependencies, optional ones included): provided whatever the probe sees.
PYTEST_FLOOR = (
    "pytest",
    "_pytest",
    "py",
    "pluggy",
    "iniconfig",
    "packaging",
    "exceptiongroup",
    "tomli",
    "colorama",
    "pygments",
)
INSTALLER_DIRS = (".local/bin", ".cargo/bin")
PYTHON_NAME = re.compile(r"python(3(\.\d+)?)?")


@dataclasses.dataclass
class Python:
    exe: str
    tag: str  # cache tag, e.g. cpython-313 (the name of its bytecode files)
    path: list[str]  # sys.path in the working folder, '' resolved
    stdlib: list[str]
    site: list[str]  # site/dist-packages and the user sites (which may not exist yet)
    provided: dict[str, int]  # top-level module -> index of the first sys.path entry providing it; -1 builtin
    namespaces: list[str] = dataclasses.field(default_factory=list)
    hooks: list[str] = dataclasses.field(default_factory=list)  # site/usercustomize files (and link targets)


@dataclasses.dataclass
class Loads:
    """The model (JSON-serialisable, so tests can write one by hand)."""

    workdir: str
    pythons: list[Python] = dataclasses.field(default_factory=list)
    path_dirs: list[str] = dataclasses.field(default_factory=list)  # the shell's PATH, in order, real paths
    programs: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # folder -> executable names
    startup: list[str] = dataclasses.field(default_factory=list)  # files the verifier's shell reads
    lib_dirs: list[str] = dataclasses.field(default_factory=list)
    libs: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # lib folder -> names
    uv_archives: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # uv cache root -> ids
    # where pytest looks for its configuration and conftest.py above the tests and the working folder
    config_dirs: list[str] = dataclasses.field(default_factory=list)

    @classmethod
    def from_json(cls, d: dict) -> "Loads":
        d = dict(d)
        d["pythons"] = [Python(**p) for p in d.get("pythons", [])]
        return cls(**d)


_CACHE: dict[tuple, Loads] = {}


def sourced_files(test_sh: str, home: str) -> list[str]:
    """The files a test.sh sources (`source F`, `. F`), $HOME and ~ expanded."""
    out = []
    for m in re.finditer(r"(?:^|[;&|]|\bthen|\bdo)\s*(?:source|\.)\s+([^\s;&|]+)", test_sh, re.M):
        f = m.group(1).strip("\"'").replace("${HOME}", home).replace("$HOME", home)
        f = home + f[1:] if f.startswith("~/") else f
        if f.startswith("/"):
            out.append(f)
    return out


async def _homes(sb) -> dict[str, str]:
    """user -> home from the image's /etc/passwd (read by the helper)."""
    try:
        data = (await sb.read_file("/etc/passwd", 1 << 20))[0].decode("utf-8", "replace")
    except Exception:  # no passwd: Docker gives HOME=/
        return {}
    out = {}
    for line in data.splitlines():
        f = line.split(":")
        if len(f) >= 6:
            out[f[0]] = f[5] or "/"
    return out


async def _listing(sb, folder: str) -> dict:
    try:
        return await sb.list_files(folder, max_files=20000) or {}
    except Exception:
        return {}


async def probe(sb, workdir: str, user: str, test_sh: str) -> Loads:
    """The model, from a pristine container `sb` of the image (see the module docstring)."""
    homes = await _homes(sb)
    home = homes.get(user, "/root" if user in ("root", "0") else "/")
    wanted = {u: h for u, h in homes.items() if u in (user, "root")} or {"root": "/root"}
    m = Loads(workdir=workdir.rstrip("/") or "/")
    # pytest's rootdir/ini/conftest discovery walks up from its arguments (/tests) and from the folder it runs
    # in: an ini file or conftest.py in any of their ancestors is read (/pytest.ini makes / the rootdir)
    for start in ("/tests", m.workdir):
        parts = start.strip("/").split("/")
        m.config_dirs += ["/" + "/".join(parts[:i]) for i in range(len(parts))]
    m.config_dirs = sorted(set(m.config_dirs))
    # the shell: PATH dirs (real paths, first occurrence), the installer folders, programs in each
    dirs = [d for d in sb.env.get("PATH", "/usr/local/bin:/usr/bin:/bin").split(":") if d.startswith("/")]
    installer = [f"{h.rstrip('/')}/{d}" for h in dict.fromkeys(wanted.values()) for d in INSTALLER_DIRS]
    named = [d for d in installer if d.split("/", 2)[-1] in test_sh or "$HOME/" + d.split("/")[-2] in test_sh]
    dirs = named + dirs + [d for d in installer if d not in named]
    kinds = await sb.kinds(*dirs) if dirs else []
    for d, k in zip(dirs, kinds):
        # /bin -> usr/bin on merged-/usr images: listed once, under its target (what docker diff names)
        real = "/usr" + d if k == "l" and not d.startswith("/usr/") else d
        if real not in m.path_dirs:
            m.path_dirs.append(real)
    for d in m.path_dirs:
        listing = await _listing(sb, d)
        m.programs[d] = sorted(
            n
            for n, info in listing.items()
            if "/" not in n and info[0] in ("f", "l") and (info[0] == "l" or info[3])
        )
    # startup files of the verifier's shell
    env = sb.env
    # (a file test.sh sources that the image lacks is test.sh's own to make: TB's installs uv, then sources
    # its env script)
    sourced = sourced_files(test_sh, home)
    have = [f for f, k in zip(sourced, await sb.kinds(*sourced) if sourced else []) if k in ("f", "l")]
    m.startup = sorted({*(env[k] for k in ("BASH_ENV", "ENV") if env.get(k, "").startswith("/")), *have})
    # the dynamic loader
    m.lib_dirs = ["/lib", "/usr/lib", "/lib64", "/usr/lib64"]
    for conf in [
        "/etc/ld.so.conf",
        *[f"/etc/ld.so.conf.d/{n}" for n in await _listing(sb, "/etc/ld.so.conf.d")],
    ]:
        try:
            text = (await sb.read_file(conf, 1 << 16))[0].decode("utf-8", "replace")
        except Exception:
            continue
        m.lib_dirs += [ln.strip() for ln in text.splitlines() if ln.strip().startswith("/")]
    m.lib_dirs = list(dict.fromkeys(m.lib_dirs))
    # Python: every interpreter on PATH (and uv's managed ones), by absolute path
    exes = [f"{d}/{n}" for d in m.path_dirs for n in m.programs[d] if PYTHON_NAME.fullmatch(n)]
    for h in dict.fromkeys(wanted.values()):
        for rel, info in (await _listing(sb, f"{h.rstrip('/')}/.local/share/uv/python")).items():
            if PYTHON_NAME.fullmatch(rel.rsplit("/", 1)[-1]) and rel.count("/") == 2 and "/bin/" in rel:
                exes.append(f"{h.rstrip('/')}/.local/share/uv/python/{rel}")
    seen = set()
    for exe in exes:
        r = await sb.exec(
            [exe, "-", m.workdir, json.dumps(wanted)], 60, user="root", stdin=PROBE_PY.encode(), cap=16 << 20
        )
        try:
            p = Python(**json.loads(r.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError, TypeError):
            continue  # not a working Python (a wrapper script, another language's `python`)
        if p.exe not in seen:
            seen.add(p.exe)
            m.pythons.append(p)
    if m.pythons:  # library names, with the first interpreter (the loader's folders are the image's)
        script = (
            "import json,os,sys\nout={}\nfor d in json.loads(sys.argv[1]):\n try: out[d]=sorted("
            "n for n in os.listdir(d) if '.so' in n)\n except OSError: pass\nprint(json.dumps(out))\n"
        )
        r = await sb.exec(
            [m.pythons[0].exe, "-", json.dumps(m.lib_dirs)], 60, user="root", stdin=script.encode()
        )
        try:
            m.libs = json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            pass
    # uv's cache: the archives the verifier's `uvx -w ...` environment is made of
    for h in dict.fromkeys(wanted.values()):
        for root in {env.get("UV_CACHE_DIR", ""), f"{h.rstrip('/')}/.cache/uv"} - {""}:
            kinds = await sb.kinds(f"{root}/archive-v0")
            if kinds[0] == "d":
                listing = await _listing(sb, f"{root}/archive-v0")
                m.uv_archives[root] = sorted({rel.split("/")[0] for rel in listing} if listing else set())
    return m


async def model(task, pool, image: str, user: str, spec) -> Loads:
    """The model for `image` (cached per image id): a short-lived container of it, probed, then removed."""
    from agent.sandbox.backends.docker.client import docker_client

    try:
        key = (
            docker_client().images.get(image).id,
            task.harbor.workdir,
            user,
            task.test_files.get("test.sh"),
        )
    except Exception:
        key = (image, task.harbor.workdir, user, task.test_files.get("test.sh"))
    if key not in _CACHE:
        async with pool.sandbox(image, spec, task=task.id) as sb:
            test_sh = (task.test_files.get("test.sh") or b"").decode("utf-8", "replace")
            _CACHE[key] = await probe(sb, sb.workdir, user, test_sh)
    return _CACHE[key]


async def pristine_checks(
    pool, image: str, spec, task_id: str, m: Loads, pycs: dict[str, bytes], same: dict[str, bytes]
) -> tuple[set[str], set[str]]:
    """In a fresh pristine container of the image: which of the agent's bytecode files (path -> content) the
    image's own interpreter compiles to the same code from the image's own source beside them (or have no
    image source: the module is then judged by its source), and which `same` files (path -> the agent's
    content) hold exactly what the image has there (touched, reinstalled: not a change)."""
    by_tag = {p.tag: p.exe for p in m.pythons}
    jobs: dict[str, list] = {}
    files, where = {}, {}
    for i, (path, data) in enumerate(sorted(pycs.items())):
        folder, _, name = path.rpartition("/")
        parts = name.split(".")  # M.cpython-313.pyc, M.cpython-313.opt-1.pyc
        if not folder.endswith("/__pycache__") or len(parts) < 3 or parts[1] not in by_tag:
            continue
        opt = int(parts[2][4:]) if parts[2].startswith("opt-") and parts[2][4:].isdigit() else 0
        files[f"{i}.pyc"] = data
        where[f"/tmp/.pycheck/{i}.pyc"] = path
        src = f"{folder.rsplit('/', 1)[0]}/{parts[0]}.py"
        jobs.setdefault(by_tag[parts[1]], []).append([f"/tmp/.pycheck/{i}.pyc", src, opt])
    pyc_ok: set[str] = set()
    same_ok: set[str] = set()
    if not jobs and not same:
        return pyc_ok, same_ok
    async with pool.sandbox(image, spec, task=task_id) as sb:
        for path, data in same.items():
            try:
                theirs, _, more = await sb.read_file(path, len(data) + 1)
            except Exception:  # not in the image (or not a file there)
                continue
            if not more and theirs == data:
                same_ok.add(path)
        if jobs:
            await sb.mkdirs("/tmp/.pycheck")
            await sb.put_files(files, dest="/tmp/.pycheck", user="root")
        for exe, job in jobs.items():
            r = await sb.exec([exe, "-", json.dumps(job)], 120, user="root", stdin=PYC_PY.encode())
            try:
                seen = json.loads(r.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                continue
            pyc_ok |= {where[k] for k, v in seen.items() if v in ("same", "no source")}
    return pyc_ok, same_ok


def describe(m: Loads) -> str:
    """One line per part of the model (for a report or a debugging session)."""
    lines = [f"working folder {m.workdir}"]
    for p in m.pythons:
        lines.append(f"{p.exe} ({p.tag}): sys.path {shlex.join(p.path)}; {len(p.provided)} modules provided")
    lines.append(
        f"PATH {':'.join(m.path_dirs)}; startup {m.startup}; uv {m.uv_archives and list(m.uv_archives)}"
    )
    return "\n".join(lines)
