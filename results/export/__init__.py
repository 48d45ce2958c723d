"""`harness export RUN --format FORMAT`: trajectories as fine-tuning data (JSONL, and optionally a local
Hugging Face `datasets` folder written with save_to_disk), or as an Inspect AI eval log.

The source is Attempt.messages, the final conversation as OpenAI chat message dicts. Infra errors
(status == "error") are never exported: they are the harness failing, not the model acting.

One module per concept (imports go down this list, never up):
  messages.py     the conversation cleaned to OpenAI's message shape; the worked example's turns
  formats.py      one converter per format (openai, hf-chat, sharegpt, prompt-completion, kto): each
                  format's fields
  validate.py     each format's record check (validate_*)
  run.py          export_run: a run folder to a JSONL file (and a `datasets` folder)
  inspect_log.py  export_inspect: a run folder to an Inspect AI log (`--format inspect`; needs inspect_ai)
  atif.py         export_atif: a run folder to ATIF trajectories (`--format atif`, Harbor's format)
"""

from results.export.formats import CONVERTERS, FORMATS
from results.export.messages import DEMONSTRATION
from results.export.run import ExportResult, export_run, save_hf_dataset
from results.export.validate import (
    VALIDATORS,
    validate_hf_chat,
    validate_kto,
    validate_openai,
    validate_prompt_completion,
    validate_sharegpt,
)

__all__ = [
    "CONVERTERS",
    "DEMONSTRATION",
    "FORMATS",
    "VALIDATORS",
    "ExportResult",
    "export_run",
    "save_hf_dataset",
    "validate_hf_chat",
    "validate_kto",
    "validate_openai",
    "validate_prompt_completion",
    "validate_sharegpt",
]
