"""A tiny Llama model folder for a real vLLM server: a locally trained tokenizer + config.

Nothing is downloaded from a model hub: :func:`build_tiny_model` trains a byte-level BPE
tokenizer on a few lines of text inside the vLLM venv and writes a 2-layer Llama
``config.json``; the weights are random (the server runs with ``--load-format dummy``).

The tokenizer carries a chat template, :data:`CHAT_TEMPLATE` (``"chat_template"`` in
``tokenizer_config.json``), so ``/v1/chat/completions`` and ``/tokenize`` with ``messages``
work. Every message renders as ``<|role|>\ncontent\n``; tools come first as
``<|tools|>\n<JSON>\n``; an assistant's tool calls follow its content as hermes-style text
``<tool_call>{"name": ..., "arguments": ...}</tool_call>``; the generation prompt is
``<|assistant|>\n``. :data:`DROP_THINK_TEMPLATE` is the same template but, as Qwen3-style
templates do, keeps only the text after ``</think>`` of the assistant turns that come before the
last user message (so a conversation's prompt ids stop being a prefix of the next turn's).
Select it per request with ``"chat_template": DROP_THINK_TEMPLATE`` (the server from
:mod:`rollout_kit.testing._vllm_cpu` runs with ``--trust-request-chat-template``) or, without
sending a template, with ``"chat_template_kwargs": {"drop_think": true}``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from .._errors import RolloutKitError
from ._venv import LOG_TAIL_CHARS, ensure_vllm_cpu_env, file_lock, read_json, venv_python

#: The file that marks a finished model folder.
MODEL_MARKER = "rollout-kit-model.json"
#: The format of the model folder; a folder with another format is rebuilt (2: chat template).
MODEL_FORMAT = 2

# One Jinja source for both templates; ``drop_think`` (a chat_template_kwargs key) overrides the
# default. Newlines are emitted only by expressions, so trim_blocks/lstrip_blocks do not matter.
_TEMPLATE_SOURCE = r"""
{%- set drop = drop_think if drop_think is defined else __DROP_DEFAULT__ -%}
{%- set ns = namespace(last_user=-1) -%}
{%- for m in messages -%}
  {%- if m['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}
{%- endfor -%}
{%- if tools -%}
  {{- '<|tools|>\n' + (tools | tojson) + '\n' -}}
{%- endif -%}
{%- for m in messages -%}
  {%- set c = m['content'] -%}
  {%- if c is none or c is undefined -%}
    {%- set c = '' -%}
  {%- elif c is not string -%}
    {%- set parts = namespace(text='') -%}
    {%- for p in c -%}
      {%- if p['type'] == 'text' -%}{%- set parts.text = parts.text + p['text'] -%}{%- endif -%}
    {%- endfor -%}
    {%- set c = parts.text -%}
  {%- endif -%}
  {%- if drop and m['role'] == 'assistant' and loop.index0 < ns.last_user and '</think>' in c -%}
    {%- set c = c.split('</think>')[-1].lstrip('\n') -%}
  {%- endif -%}
  {{- '<|' + m['role'] + '|>\n' + c -}}
  {%- if m['tool_calls'] is defined and m['tool_calls'] -%}
    {%- for tc in m['tool_calls'] -%}
      {%- set f = tc['function'] if tc['function'] is defined else tc -%}
      {%- set args = f['arguments'] if f['arguments'] is string else (f['arguments'] | tojson) -%}
      {{- '<tool_call>{"name": ' + (f['name'] | tojson) -}}
      {{- ', "arguments": ' + args + '}</tool_call>' -}}
    {%- endfor -%}
  {%- endif -%}
  {{- '\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|assistant|>\n' -}}
{%- endif -%}
"""


def chat_template(*, drop_think: bool = False) -> str:
    """The tiny model's chat template (Jinja source).

    Args:
        drop_think: whether earlier assistant turns (those before the last user message) keep
            only the text after their last ``</think>``, as Qwen3-style templates do. Either
            template lets ``chat_template_kwargs={"drop_think": ...}`` override this default.

    Returns:
        :data:`CHAT_TEMPLATE` or :data:`DROP_THINK_TEMPLATE`.
    """
    return _TEMPLATE_SOURCE.strip().replace("__DROP_DEFAULT__", "true" if drop_think else "false")


#: The chat template in the model's ``tokenizer_config.json`` (the server's default).
CHAT_TEMPLATE = chat_template()
#: The think-dropping variant, for a per-request ``"chat_template"``.
DROP_THINK_TEMPLATE = chat_template(drop_think=True)


# Runs inside the vllm venv (the project venv has neither transformers nor tokenizers).
_BUILD_MODEL_SCRIPT = r'''
import json, sys
from pathlib import Path
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, PreTrainedTokenizerFast

out = Path(sys.argv[1])
vocab_target = int(sys.argv[2])
template = sys.stdin.read()
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
# the template goes into tokenizer_config.json (transformers 5 would write chat_template.jinja)
(out / "chat_template.jinja").unlink(missing_ok=True)
tok_config = json.loads((out / "tokenizer_config.json").read_text())
tok_config["chat_template"] = template
(out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2) + "\n")
config = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256,
                     num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                     head_dim=64, max_position_embeddings=2048, bos_token_id=0, eos_token_id=1,
                     pad_token_id=2, tie_word_embeddings=False)
config.dtype = "bfloat16"
config.save_pretrained(str(out))
if sys.argv[3] != "-":  # real (random, seeded) weights, for servers that load them from disk
    import torch
    from transformers import LlamaForCausalLM
    torch.manual_seed(int(sys.argv[3]))
    # logits near zero, as vLLM's dummy weights give: every logprob is about -ln(vocab)
    config.initializer_range = 5e-4
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(str(out))
print(json.dumps({"vocab_size": len(fast)}))
'''


def _finished(marker: dict[str, object] | None, weights_seed: int | None) -> bool:
    """Whether a folder's marker says it holds this format (and these weights)."""
    return (marker is not None and marker.get("format") == MODEL_FORMAT
            and marker.get("weights_seed") == weights_seed)


def build_tiny_model(folder: Path, python: Path | None = None, *, vocab_size: int = 320,
                     weights_seed: int | None = None) -> Path:
    """Write a tiny Llama model folder (tokenizer + config; weights come from ``dummy`` or,
    with ``weights_seed``, from seeded random weights saved beside them).

    A byte-level BPE tokenizer with ``<s>``, ``</s>``, ``<pad>`` (ids 0, 1, 2) is trained on a
    few lines of text and given :data:`CHAT_TEMPLATE`; the config is a 2-layer Llama with
    hidden size 128 and 2 heads of ``head_dim`` 64 (the CPU attention kernel rejects small head
    sizes), ``vocab_size`` equal to the tokenizer's real length, ``max_position_embeddings``
    2048, bfloat16. Skipped when the folder already holds a finished model of this
    :data:`MODEL_FORMAT`.

    Args:
        folder: where to write the model.
        python: the interpreter of the vllm venv; default: :func:`ensure_vllm_cpu_env`'s.
        vocab_size: the BPE vocabulary size to train towards.
        weights_seed: write ``model.safetensors`` with random weights drawn from this torch
            seed (about 1 MB): for servers that load weights from disk and for weight updates
            (two seeds, two models with different greedy outputs). ``None``: no weights.

    Returns:
        ``folder``.

    Raises:
        RolloutKitError: the build script failed (the message carries its output).
    """
    folder = folder.expanduser().resolve()
    marker_path = folder / MODEL_MARKER
    if _finished(read_json(marker_path), weights_seed):
        return folder
    py = python or venv_python(ensure_vllm_cpu_env())
    folder.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(folder.parent / f".{folder.name}.lock"):
        if _finished(read_json(marker_path), weights_seed):
            return folder
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
        try:
            proc = subprocess.run(
                [str(py), "-c", _BUILD_MODEL_SCRIPT, str(tmp), str(vocab_size),
                 "-" if weights_seed is None else str(weights_seed)],
                input=CHAT_TEMPLATE, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise RolloutKitError(
                    f"building the tiny model failed (exit {proc.returncode}):\n"
                    f"{(proc.stdout + proc.stderr)[-LOG_TAIL_CHARS:]}")
            info = json.loads(proc.stdout.strip().splitlines()[-1])
            (tmp / MODEL_MARKER).write_text(json.dumps(
                {"format": MODEL_FORMAT, "vocab_size": info["vocab_size"],
                 "weights_seed": weights_seed}) + "\n")
            if folder.exists():
                shutil.rmtree(folder)
            tmp.rename(folder)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return folder
