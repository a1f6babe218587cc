"""Ctrl-C on a script's blocking ``run_rl``: the loop stops, every task accounted, the steps
so far kept, the servers generating."""

from __future__ import annotations

import ast
import signal
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import asyncio, itertools
    from rollout_kit import GenerationConfig, RolloutController, SingleTurnWorkflow
    from rollout_kit.rl import RLConfig, run_rl
    from rollout_kit.sim import serve_in_thread

    def reward(prompt, completion, prompt_ids, completion_ids, **_):
        return 1.0

    async def train(batch, step):
        if step == 1:
            print("training", flush=True)
            await asyncio.Event().wait()  # until interrupted

    wf = SingleTurnWorkflow(reward, GenerationConfig(max_new_tokens=2000))
    with serve_in_thread("sglang", 1, time_scale=0.05, output_length="lognormal",
                         mean_output_tokens=100, context_length=100000) as cl:
        ctl = RolloutController(sglang=cl.addresses, scrape_interval=None)
        try:
            run_rl(ctl, itertools.cycle(["Explain"]), wf,
                   RLConfig(steps=5, batch_size=4, max_staleness=2), train=train)
        except KeyboardInterrupt:
            statuses = sorted(set(ctl.traces()["status"]))
            steps = list(ctl.tracer.steps_df()[0]["status"])
            paused = any(s.state()["paused"] for s in cl)
            print("interrupted", statuses, len(ctl.results.unfinished()), steps, paused,
                  flush=True)
        ctl.close()
''')


def test_ctrl_c_stops_the_loop_with_every_task_accounted() -> None:
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the trainer is in step 1
        assert line.strip() == "training", proc.stderr.read() if proc.stderr else line
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    last = out.strip().splitlines()[-1]
    assert last.startswith("interrupted "), out + err[-3000:]
    assert last.endswith(" 0 ['ok', 'cancelled'] False"), last
    statuses = last.removeprefix("interrupted ").split("]")[0] + "]"
    assert set(ast.literal_eval(statuses)) <= {"accepted", "rejected", "cancelled"}, last
