"""``ReplicaActor``: one engine replica as a Ray actor (its own vLLM and relserve scheduler).

The cluster starts a relQuery's share of rows with ``start`` and collects finished rows with
``poll``; a poll that fails or hangs is how the cluster notices a dead or stuck replica.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from relserve.policy.types import Tenancy
from relserve.results import RowResult

if TYPE_CHECKING:
    from relserve.engine.handle import RelQueryHandle


class ReplicaActor:
    """Holds one ``relserve.engine.Engine``; rows come back by polling, so the caller sees them as
    they finish and a dead replica shows as a failed call."""

    def __init__(self, index: int, options: Mapping[str, object], cores: list[int] | None = None) -> None:
        if cores:
            # vLLM-CPU binds its model threads to these cores (read before it starts)
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, cores))
            os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        from relserve.engine.engine import Engine

        self.index = index
        self.engine = Engine(**options)
        self._lock = threading.Lock()
        #: rel_id -> (handle, original row index of each local row, how many rows were sent)
        self._held: dict[str, tuple[RelQueryHandle, list[int], int]] = {}

    def info(self) -> dict[str, object]:
        e = self.engine
        return {
            "pid": os.getpid(),
            "index": self.index,
            "model_id": e.model_id,
            "policy": e.policy,
            "kv_capacity_tokens": e.kv_capacity_tokens,
            "block_size": e.block_size,
        }

    def pid(self) -> int:
        return os.getpid()

    def start(
        self, rel_id: str, options: dict[str, Any], prompts: list[str], indices: list[int], tenancy: Tenancy | None = None
    ) -> None:
        """Run ``prompts`` (rows ``indices`` of relQuery ``rel_id``) as one local relQuery, as
        ``tenancy``'s work (its prefix-cache salt and share) when given."""
        from relserve.relquery import RelQuery

        rq = RelQuery.from_prompts(prompts, rel_id=rel_id, **options)
        handle = self.engine.submit(rq, tenancy=tenancy)
        with self._lock:
            self._held[rel_id] = (handle, indices, len(prompts))

    def poll(self, rel_id: str, seen: int) -> tuple[list[RowResult], str, dict | None]:
        """Rows finished after the first ``seen`` ones (indices mapped back), the part's state:
        "running", "done", or "unknown" (this replica never got it: it restarted since), and once
        done its latency breakdown here (waiting, core, tail seconds from its submission)."""
        with self._lock:
            held = self._held.get(rel_id)
        if held is None:
            return [], "unknown", None
        handle, indices, _ = held
        rows = [
            RowResult(indices[r.index], r.text, r.error, r.prompt_tokens, r.output_tokens,
                      r.cached_tokens, r.finish_reason, r.label_logprobs, label_mass=r.label_mass)
            for r in handle.rows_since(seen)
        ]
        done = handle.done() and seen + len(rows) == len(indices)
        if not done:
            return rows, "running", None
        with self._lock:
            self._held.pop(rel_id, None)
        try:
            st = handle.result(0).stats
            times = {"waiting_s": st.waiting_s, "core_s": st.core_s, "tail_s": st.tail_s}
        except Exception:  # the engine failed the part: its rows carry the errors
            times = None
        return rows, "done", times

    def cancel(self, rel_id: str) -> None:
        with self._lock:
            held = self._held.get(rel_id)
        if held is not None:
            held[0].cancel()

    def warm_prefix(self, text: str, system: str | None, tenancy: Tenancy | None = None) -> int:
        return self.engine.warm_prefix(text, system, tenancy=tenancy)

    def reset_prefix_cache(self) -> None:
        self.engine.reset_prefix_cache()

    def scheduler_stats(self) -> dict[str, Any] | None:
        # sent to the cluster as JSON-like data, read back into ``SchedulerStats`` there
        return self.engine.scheduler_stats().model_dump() if self.engine.uses_plugin else None

    def alive(self) -> bool:
        return self.engine.alive

    def close(self) -> None:
        self.engine.close()
