"""`harness show`: one attempt as text (steps, verdict, flags, the final diff)."""

from __future__ import annotations

from typing import Optional

from results.schema import Attempt, clip


def format_attempt(a: Attempt, diff: Optional[str]) -> str:
    out = [
        f"{a.task_id} sample {a.sample} ({a.key}) · model {a.model}",
        f"verdict: {a.status} · reward {a.reward:.2f} · reason {a.reason or '-'}"
        f" · exit {a.exit_reason or '-'}"
        f"{' · IMPOSSIBLE task: a pass is a cheat' if a.impossible else ''}",
    ]
    if a.error:
        out.append(f"error: {clip(a.error, 1000)}")
    for s in a.steps:
        out.append(f"\n--- step {s.index + 1} (exit code {'-' if s.exit_code is None else s.exit_code})")
        for x in s.actions:
            if x.kind == "bash":
                out.append(f"$ {x.command or ''}")
            elif x.kind == "write":
                out.append(f"write {x.path or ''} ({len(x.content or '')} chars)")
            else:
                out.append(x.kind)
        if not s.actions:
            out.append(clip(s.raw_output, 600))
        if s.observation:
            out.append(clip(s.observation, 1200))
    if a.tests:
        out.append("\ntests: " + ", ".join(f"{t.id} {t.outcome}" for t in a.tests))
    if a.detail:
        out.append(f"detail: {clip(a.detail, 600)}")
    for f in a.flags:
        out.append(f"flag: {f.pattern} at step {f.step + 1}: {f.evidence}")
    if diff is None:
        out.append(
            f"\ndiff: not kept (a run written before changes were kept; {a.patch_files} files changed)"
        )
    else:
        kept = a.changes
        extra = f"; over the keep cap, not stored: {', '.join(kept.omitted)}" if kept and kept.omitted else ""
        out.append(f"\ndiff ({a.patch_files} files changed{extra}):")
        out.append(diff or "(no changes)")
    return "\n".join(out)
