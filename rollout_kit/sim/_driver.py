"""Drive the sequences of one HTTP request through the engine (shared by both flavours)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ._state import ABORT_RUNNING, AdmitResult, Emit, SimEngine, SimSequence


async def drive(engine: SimEngine, seq: SimSequence, emit: Emit | None) -> AdmitResult:
    """Admit, run and release one sequence; a cancelled handler counts as an abort."""
    try:
        res = await engine.admit(seq)
        if res == "ok":
            await engine.run(seq, emit)
        return res
    except asyncio.CancelledError:
        if seq.aborted is None:
            seq.aborted = ABORT_RUNNING
        raise
    finally:
        engine.release(seq, record=True)


async def drive_all(engine: SimEngine, seqs: Sequence[SimSequence],
                    emit: Emit | None) -> bool:
    """Drive every sequence concurrently.

    Returns:
        False if the waiting queue was full for any of them (the others are aborted).
    """
    if len(seqs) == 1:
        return await drive(engine, seqs[0], emit) != "full"
    results = await asyncio.gather(*(drive(engine, s, emit) for s in seqs))
    if "full" in results:
        return False
    return True
