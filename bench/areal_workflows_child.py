"""Child of ``bench_areal_workflows.py``, run in the AReaL venv: tasks/s of AReaL's own
``RLVRWorkflow`` (through ``engine.agenerate``) and of rollout_kit's ``SingleTurnWorkflow`` on
the same zero-latency simulator, same prompt ids, same sampling, interleaved rounds; and
AReaL's own cost per episode with an engine that answers at once (no HTTP, no rollout_kit);
and the boundary alone: AReaL's request through ``agenerate`` vs rollout_kit's through
``generate_async``.

    python areal_workflows_child.py URL MODEL_DIR N ROUNDS   # prints one JSON object
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from typing import Any

from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest as AReaLRequest
from areal.api.io_struct import ModelResponse as AReaLResponse
from areal.workflow.rlvr import RLVRWorkflow
from transformers import AutoTokenizer

import rollout_kit as rk

MAX_NEW = 16


def reward(*args: Any, **data: Any) -> float:  # noqa: ARG001 - the signature
    """AReaL's reward signature ``(prompt, completion, prompt_ids, completion_ids, **data)``."""
    return float(len(args[1]) % 2)


class Instant:
    """An engine answering AReaL's agenerate at once: AReaL's own per-episode cost."""

    async def agenerate(self, req: Any) -> AReaLResponse:
        out = [5] * MAX_NEW
        return AReaLResponse(input_tokens=list(req.input_ids), output_tokens=out,
                             output_logprobs=[-0.5] * MAX_NEW, output_versions=[0] * MAX_NEW)

    def get_version(self) -> int:
        return 0


class Boundary:
    """The boundary alone: one call per episode with AReaL's request through ``agenerate``,
    or rollout_kit's through ``generate_async`` (in a session with a generate phase, as
    ``agenerate`` opens), nothing else."""

    def __init__(self, areal: bool, g: GenerationHyperparameters) -> None:
        self.areal = areal
        self.g = g.new(n_samples=1)  # AReaL's own copy per request is AReaL's cost: made once
        self.ours = rk.GenerationConfig(max_new_tokens=MAX_NEW, greedy=True)

    async def arun_episode(self, engine: Any, data: Any) -> Any:
        if self.areal:
            resp = await engine.agenerate(AReaLRequest(input_ids=data["input_ids"],
                                                       gconfig=self.g))
        else:
            with rk.tracing.trace_session(), rk.tracing.trace_phase("generate"):
                resp = await engine.generate_async(rk.ModelRequest(
                    input_ids=data["input_ids"], gconfig=self.ours))
        return len(resp.output_tokens)


async def rate(ctl: rk.RolloutController, data: list[Any], wf: Any) -> float:
    t0 = time.perf_counter()
    results = await ctl.rollout_batch_async(data, wf)
    dt = time.perf_counter() - t0
    assert all(r.ok for r in results), results[0].reason
    return len(data) / dt


async def main(url: str, model: str, n: int, rounds: int) -> dict[str, Any]:
    tok = AutoTokenizer.from_pretrained(model)
    msgs = [[{"role": "user", "content": f"What is {i} + {i % 7}?"}] for i in range(n)]
    areal_data = [{"messages": m} for m in msgs]
    ids = [tok.apply_chat_template(m, tokenize=True, add_generation_prompt=True,
                                   return_dict=False) for m in msgs]
    ours_data = [{"input_ids": i} for i in ids]
    g = GenerationHyperparameters(max_new_tokens=MAX_NEW, greedy=True)
    areal_wf = RLVRWorkflow(reward, g, tok)
    ours_wf = rk.SingleTurnWorkflow(reward, rk.GenerationConfig(max_new_tokens=MAX_NEW,
                                                                greedy=True), tokenizer=tok)
    ctl = rk.RolloutController(sglang=[url.removeprefix("http://")])
    await rate(ctl, areal_data[:32], areal_wf)  # warm up both paths
    await rate(ctl, ours_data[:32], ours_wf)
    areal, ours, bare, via_agenerate, via_generate = [], [], [], [], []
    for _ in range(rounds):
        areal.append(await rate(ctl, areal_data, areal_wf))
        ours.append(await rate(ctl, ours_data, ours_wf))
        via_agenerate.append(await rate(ctl, ours_data, Boundary(True, g)))
        via_generate.append(await rate(ctl, ours_data, Boundary(False, g)))
    await ctl.close_async()
    engine = Instant()
    for _ in range(rounds):
        t0 = time.perf_counter()
        await asyncio.gather(*[areal_wf.arun_episode(engine, d) for d in areal_data])
        bare.append(n / (time.perf_counter() - t0))
    runs = {"areal": areal, "ours": ours, "areal_alone": bare,
            "agenerate": via_agenerate, "generate_async": via_generate}
    return {**runs, "median": {k: statistics.median(v) for k, v in runs.items()}}


if __name__ == "__main__":
    url, model, n, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    print(json.dumps(asyncio.run(main(url, model, n, rounds))))
