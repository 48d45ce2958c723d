"""Harbor tasks: their runtime contract and their verifier. The harbor evaluator kind (harbor_kind.py) takes
each capability from a module here: the agent's sandbox under the contract (runtime.py), the task's images
and network (environment.py), the tamper checks of what the traced verifier loaded (tamper.py, with the
rule in traced.py and the pristine load map in loadmap.py), the verifier and
its modes (verifier.py: tests/test.sh writing /logs/verifier/reward.*) and multi-step tasks (steps.py).

The agent works in the image's WORKDIR as the task's user, on a writable root filesystem, and what it starts
keeps running between its commands (agent/sandbox/backends/docker/native.py). When it is done, tests/test.sh
runs with the hidden tests at /tests, as the verifier's user, with [verifier] env, in one of three isolation
modes ([verifier] isolation, or Harbor's environment_mode):

  shared    the agent's own container, its processes still running (services it started answer the
            tests). Harbor's default, and ours for a task that does not choose.
  snapshot  a new container from a `docker commit` of the agent's container: every filesystem change is
            kept, no agent process survives.
  fresh     a new container of the task's image (or the verifier's own environment) plus the captured
            changes of the working folder and the collected artifacts. Changes elsewhere are lost.
            Harbor's `separate`; the default for our own tasks.

In every mode the hidden tests enter a container only after the agent has finished, and /tests and
/logs/verifier are emptied and recreated (/logs/verifier writable by the verifier's user only) just before
test.sh runs, so no reward file the agent planted survives; every file operation is the static helper's own
(never the container's sh/tar/ls). Stricter than Harbor: test.sh runs under the static helper's tracer, and
an agent file the traced verifier loaded in place of what its pristine runs loaded (traced.py's rule over
the task's load map, loadmap.py; fresh: the working folder's changes, snapshot/shared: every change docker
diff lists) scores 0 as `tamper` (tamper.py). Remaining limits
(Harbor's contract, README "Harbor tasks"): in shared mode the agent's processes run alongside test.sh and
can change what it sees; in snapshot and shared modes test.sh runs on the filesystem the agent left.
"""
