"""agent: the part that acts -- sandboxes, models, and the execute-verify-correct loop."""

# The sandbox user: every sandbox image has it and owns /workspace by it; the agent's commands and the
# candidate's code in grading run as it. Here, the one place it is written, because the graders and task
# exports read it without importing the sandbox (and Docker's client). A uid no host account uses: per-uid
# limits are shared across the host. (The in-container programs, agent/sandbox/server.py and the candidate
# proxy, receive it in their environment.)
AGENT_UID = 10001
