"""Load-test datasets: what each open-loop request sends (nothing is downloaded).

Every loader returns ``list[LoadRequest]``::

    read_jsonl("prompts.jsonl")                     {"prompt": ..., "output_tokens": N} lines
    read_sharegpt("sharegpt.json", num=200)         ShareGPT conversations (vllm bench serve rules)
    synthetic(100, input_len=512, output_len=128, dist="uniform", range_ratio=0.5)
    shared_prefix(num_groups=4, prompts_per_group=8, prefix_len=256, suffix_len=32,
                  output_len=64)                    prefix caching: a shared prefix per group
    read_mooncake("trace.jsonl", time_scale=0.5)    a Mooncake trace, replayed (timestamps)
    from_traces(ctl.tracer.frames(), prompts="lengths")
                                                    a recorded run: its arrivals, lengths
                                                    and samples per task (timestamps)
    read_areal_sessions("sessions-r0.jsonl", areal_dump="log")   an AReaL run, the same
    load_dataset("random", num=100, input_len=64)   by ``vllm bench serve --dataset-name``

Conversation datasets return ``list[Conversation]`` (turns sent one after another, a think
time apart; run them with :func:`rollout_kit.load.run_conversations_async`)::

    synthetic_conversations(50, turns=4, input_len=128, output_len=64,
                            system_prompt_len=256, think_time="exponential:2")
    read_sharegpt_conversations("sharegpt.json", num=100, min_turns=2)
    read_multiturn_json("sharegpt_conv_128.json")   vLLM's benchmarks/multi_turn input
    read_agent_trace("agent.jsonl", time_scale=0.5)  Mooncake-style agent sessions

:mod:`rollout_kit.load` exports them (this package exports nothing of its own).

Lengths are tokens. Synthetic, shared-prefix and trace prompts are **token ids** drawn from a
vocabulary without its special ids, so ``prompt_len`` is exact on the server (no re-encoding);
they ask for exactly ``output_len`` tokens (``ignore_eos``), as ``vllm bench serve`` forces for
its random datasets. The vocabulary defaults to the simulator's byte tokenizer (259 ids, 0..2
special), which also fits the tiny vLLM CPU test model; pass ``tokenizer=`` (a path or object,
see :mod:`rollout_kit.load._tokenize`) to use another. Text datasets (JSONL, ShareGPT) count
tokens with ``tokenizer`` (default: the simulator's byte counting).

Bad input raises :class:`~rollout_kit.DatasetError` with one line that names the file
and the 1-based line (or entry) number.

Modules: :mod:`.request` (:class:`LoadRequest`), :mod:`.text` (JSONL, ShareGPT),
:mod:`.synthetic` (random lengths, shared prefixes), :mod:`.traces` (Mooncake replay),
:mod:`.recorded` (a recorded run replayed as load: this project's traces, AReaL's session
trace), :mod:`.conversation` (:class:`Conversation`, :class:`ThinkTime`), :mod:`.multiturn`
(the conversation datasets), :mod:`.by_name` (:func:`load_dataset`) and :mod:`.common` (what they
share: errors, checks, files, the tokenizer and the default vocabulary).
"""
