"""lora: the post-training loop. A local model learns from its own solved attempts.

data.py   which attempts to keep, and token-exact training sequences from them
sft.py    LoRA fine-tuning (peft), a plain training loop
train.py  the rounds: sample -> filter -> dataset -> SFT -> evaluate, resumable by phase
          (phases.py each phase, round_metrics.py the metrics, rundir.py the phase markers and split,
          backend.py what the loop calls on the rest of harness)
cli.py    `harness train`
"""
