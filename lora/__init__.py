"""lora: the post-training loop. A local model learns from its own solved attempts.

data.py   which attempts to keep, and token-exact training sequences from them
sft.py    LoRA fine-tuning (peft), a plain training loop
train.py  the rounds: sample -> filter -> dataset -> SFT -> evaluate, resumable by phase
cli.py    `harness train`
"""
