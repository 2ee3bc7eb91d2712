"""``Cluster``: N engine replicas (Ray actors) behind the ``Backend`` protocol, like ``Engine``.

``submit`` renders and tokenizes the relQuery here (the dispatcher needs prompt lengths and
prefix blocks), asks the dispatcher where its rows go and starts each part on its replica. One
driver thread polls the replicas for finished rows, feeds the dispatcher's books, and notices a
replica that died (a failed call) or stopped answering (no answer within ``replica_timeout_s``):
its unanswered rows go to the other replicas, and Ray restarts it (``max_restarts``).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from relserve.block_hashes import block_hashes
from relserve.cluster.dispatch import DISPATCHERS, Work, make_dispatcher
from relserve.engine.admission import admit
from relserve.engine.backend_base import BackendBase, Span, finished_result
from relserve.engine.handle import RelQueryHandle
from relserve.engine.scheduler_stats import ClusterSchedulerStats
from relserve.errors import ConfigError, EngineError, RowError
from relserve.policy.types import Tenancy
from relserve.relquery import RelQuery
from relserve.results import RowResult

#: RelQuery options a replica needs to run the rows (on_error is applied here, on the whole)
_PASSED = ("max_tokens", "temperature", "top_p", "seed", "choices", "json_schema", "system", "ignore_eos",
           "priority", "deadline_s", "score_labels", "label_prior", "prompt_shape", "answer_field", "call_key")
_POLL_S = 0.1
#: how often a dead replica is asked whether Ray has restarted it
_REVIVE_S = 2.0


@dataclass
class _Part:
    key: str
    replica: int
    #: original row index of each row sent
    indices: list[int]
    seen: int = 0
    done: bool = False
    #: when the part was sent (monotonic, this process)
    sent: float = 0.0
    poll: Any = None
    poll_sent: float = 0.0
    #: the replica's waiting / core / tail seconds for the part, once done
    times: dict | None = None


@dataclass
class _Run:
    rq: RelQuery
    handle: RelQueryHandle
    arrival: float
    prompts: list[str | RowError]
    ids: dict[int, list[int]]
    parts: list[_Part] = field(default_factory=list)
    rounds: int = 0
    redispatched: int = 0
    lost_replicas: list[int] = field(default_factory=list)
    #: whose work it is (the server's tenants): every part, re-dispatched ones too, runs in its
    #: prefix-cache namespace and with its share on whichever replica gets it
    tenancy: Tenancy | None = None


def _ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("replicas need Ray: pip install 'relserve[cluster]' (or pip install ray)") from None
    return ray


class Cluster(BackendBase):
    """Engine replicas on Ray, used like an ``Engine``.

    >>> cluster = Cluster(replicas=2, kv_cache_gb=0.5)     # a local Ray, started on demand
    >>> cluster = Cluster(replicas=8, address="ray://head:10001")   # an existing Ray cluster
    >>> cluster.submit(RelQuery("Is {review} positive?", rows, max_tokens=4)).result()
    """

    #: ``submit`` and ``warm_prefix`` take a ``Tenancy`` and hand it to the replica running each part
    supports_tenancy = True

    def __init__(
        self,
        replicas: int | None = None,
        model: str | None = None,
        policy: str | None = None,
        *,
        address: str | None = None,
        dispatcher: str = "relquery",
        replica_timeout_s: float = 120.0,
        max_restarts: int = 3,
        cores_per_replica: int | None = None,
        **options: object,
    ) -> None:
        if replicas is None:
            replicas = int(os.environ.get("RELSERVE_REPLICAS", "2"))
        if not isinstance(replicas, int) or replicas < 1:
            raise ConfigError(f"replicas must be a positive integer, got {replicas!r}")
        if dispatcher not in DISPATCHERS:  # before anything starts
            raise ConfigError(f"unknown dispatcher {dispatcher!r}; choose one of {', '.join(DISPATCHERS)}")
        # an unknown policy fails here, not in every replica
        s = self._configure(model, policy, options)
        self.num_replicas = replicas
        self.replica_timeout_s = replica_timeout_s
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        self._load_tokenizer()

        ray = _ray()
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            address = address or os.environ.get("RELSERVE_RAY_ADDRESS")
            kwargs: dict[str, object] = {"include_dashboard": False, "log_to_driver": not s.quiet}
            if address is None:  # a local Ray: keep its shared-memory store small
                kwargs["object_store_memory"] = 128 << 20
            ray.init(address=address, **kwargs)
        local = address is None
        ncpu = os.cpu_count() or 1
        if cores_per_replica is None and local:
            cores_per_replica = max(ncpu // replicas, 1)
        from relserve.cluster.actor import ReplicaActor

        remote = ray.remote(num_cpus=0, max_restarts=max_restarts, max_task_retries=0)(ReplicaActor)
        engine_options = s.model_dump(exclude_unset=True) | {"model": s.model, "policy": s.policy}
        self._actors = []
        for i in range(replicas):
            cores = None
            if local and cores_per_replica:
                first = (i * cores_per_replica) % ncpu
                cores = [(first + k) % ncpu for k in range(cores_per_replica)]
            self._actors.append(remote.remote(i, engine_options, cores))
        try:
            infos = ray.get([a.info.remote() for a in self._actors])
        except Exception as e:
            self._shutdown_actors()
            raise EngineError(f"the engine replicas failed to start: {e}") from e
        self._pids = [info["pid"] for info in infos]
        caps = [info["kv_capacity_tokens"] for info in infos if info["kv_capacity_tokens"]]
        self.kv_capacity_tokens = min(caps) if caps else None
        kv = self.kv_capacity_tokens or int(s.kv_cache_gb * (1 << 30) / 36864)
        self._dispatcher = make_dispatcher(
            dispatcher, replicas, self.cost_model, block_size=s.block_size, cache_blocks=max(kv // s.block_size, 1),
            kv_capacity_tokens=kv, max_num_seqs=s.max_num_seqs, max_num_batched_tokens=s.max_num_batched_tokens,
        )
        self.dispatcher = dispatcher
        self._lock = threading.RLock()
        self._runs: dict[str, _Run] = {}
        self._revive: dict[int, Any] = {}
        self._idle = threading.Event()
        self._idle.set()
        self._closed = False
        self._driver = threading.Thread(target=self._drive, name="relserve-cluster", daemon=True)
        self._driver.start()

    # ------------------------------------------------------------------ engine-like surface

    uses_plugin = False  # the scheduler controls live in each replica

    @property
    def dead_reason(self) -> str | None:
        if self._closed:
            return "the cluster is closed"
        if not any(b.alive for b in self._dispatcher.books):
            return "every engine replica died; start a new Cluster"
        return None

    def replica_pids(self) -> list[int]:
        """Process id of each replica (as last seen; a restarted replica has a new one)."""
        return list(self._pids)

    def placement(self, rel_id: str) -> list[dict]:
        """Where the rows of a running relQuery went: [{"replica", "rows", "done"}] (empty once finished)."""
        with self._lock:
            run = self._runs.get(rel_id)
            parts = list(run.parts) if run is not None else []
        return [{"replica": p.replica, "rows": len(p.indices), "done": p.done} for p in parts]

    def replica_alive(self) -> list[bool]:
        return [b.alive for b in self._dispatcher.books]

    def warm_prefix(self, text: str = "", system: str | None = None, tenancy: Tenancy | None = None) -> int:
        """Warm the prefix on every live replica (any of them may get the rows), in the
        prefix-cache namespace of ``tenancy`` if it has a salt."""
        ray = _ray()
        refs = [a.warm_prefix.remote(text, system, tenancy) for a, b in zip(self._actors, self._dispatcher.books) if b.alive]
        return max(ray.get(refs), default=0)

    def reset_prefix_cache(self) -> None:
        ray = _ray()
        self.wait_idle()
        ray.get([a.reset_prefix_cache.remote() for a, b in zip(self._actors, self._dispatcher.books) if b.alive])
        for b in self._dispatcher.books:
            b.cache.clear()

    def scheduler_stats(self, steps: bool = False, clear: bool = False) -> ClusterSchedulerStats:
        ray = _ray()
        return ClusterSchedulerStats.model_validate({"replicas": ray.get([a.scheduler_stats.remote() for a in self._actors])})

    def set_policy(self, *args: object, **kwargs: object) -> None:
        raise ConfigError("switching the policy of a running cluster is not supported; start a new Cluster")

    def wait_idle(self, timeout: float | None = None) -> bool:
        return self._idle.wait(timeout)

    def close(self) -> None:
        """Cancel what runs, stop the replicas (and the local Ray this cluster started)."""
        if self._closed:
            return
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            run.handle.cancel()
        self._closed = True
        self._driver.join(10)
        self._shutdown_actors()

    def _shutdown_actors(self) -> None:
        ray = _ray()
        try:
            ray.get([a.close.remote() for a in self._actors], timeout=60)
        except Exception:
            pass  # a dead replica has nothing to close
        for a in self._actors:
            ray.kill(a, no_restart=True)
        if self._owns_ray:
            ray.shutdown()

    # ------------------------------------------------------------------ relQueries

    def submit(self, rq: RelQuery, tenancy: Tenancy | None = None) -> RelQueryHandle:
        if rq.budget is not None:  # its rows are placed on replicas at once: nothing would hold it
            raise ConfigError("a budget (max_tokens_total, max_seconds) is held by the embedded Engine or a server; "
                              "the Ray cluster does not hold one yet: run the call without it, or on an Engine")
        a = admit(self, rq, lambda: self._cancel(rq.rel_id))
        handle = a.handle
        run = _Run(rq, handle, a.arrival, a.prompts, dict(a.rows), tenancy=tenancy)
        with self._lock:
            if rq.rel_id in self._runs:
                raise ConfigError(f"a relQuery with rel_id {rq.rel_id!r} is already running")
            self._idle.clear()
            self._runs[rq.rel_id] = run
            self._dispatch(run, sorted(run.ids))
            if not run.parts:
                self._finish(run)
        return handle

    def _dispatch(self, run: _Run, rows: list[int]) -> None:
        """Place ``rows`` (original indices) and start each part on its replica (lock held)."""
        if not rows:
            return
        key = run.rq.rel_id if run.rounds == 0 else f"{run.rq.rel_id}~{run.rounds}"
        run.rounds += 1
        bs = self.block_size
        work = Work(key, [len(run.ids[i]) for i in rows], [block_hashes(run.ids[i], bs) for i in rows], run.rq.max_tokens)
        parts = self._dispatcher.place(work, time.monotonic())
        options = {k: getattr(run.rq, k) for k in _PASSED}
        for p in parts:
            indices = [rows[j] for j in p.rows]
            actor = self._actors[p.replica]
            actor.start.remote(key, options, [run.prompts[i] for i in indices], indices, run.tenancy)
            run.parts.append(_Part(key, p.replica, indices, sent=time.monotonic()))

    def _cancel(self, rel_id: str) -> None:
        with self._lock:
            run = self._runs.get(rel_id)
            if run is None:
                return
            for part in run.parts:
                if not part.done:
                    self._actors[part.replica].cancel.remote(part.key)

    # ------------------------------------------------------------------ the driver thread

    def _drive(self) -> None:
        ray = _ray()
        while not self._closed:
            try:
                self._poll_once(ray)
                self._check_revivals(ray)
            except Exception:  # the driver must outlive any one bad answer
                import traceback

                traceback.print_exc()
            time.sleep(_POLL_S)

    def _poll_once(self, ray) -> None:
        with self._lock:
            parts = [(run, part) for run in self._runs.values() for part in run.parts if not part.done]
            now = time.monotonic()
            for _, part in parts:
                if part.poll is None and self._dispatcher.books[part.replica].alive:
                    part.poll = self._actors[part.replica].poll.remote(part.key, part.seen)
                    part.poll_sent = now
        refs = [part.poll for _, part in parts if part.poll is not None]
        if not refs:
            return
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=_POLL_S)
        ready_set = set(ready)
        with self._lock:
            now = time.monotonic()
            for run, part in parts:
                if part.poll is None or part.done:
                    continue
                if part.poll not in ready_set:
                    if now - part.poll_sent > self.replica_timeout_s:
                        self._replica_lost(part.replica, f"no answer in {self.replica_timeout_s:g} s")
                    continue
                ref, part.poll = part.poll, None
                try:
                    rows, state, times = ray.get(ref)
                except Exception as e:  # the replica died (or is restarting)
                    self._replica_lost(part.replica, f"{type(e).__name__}")
                    continue
                for r in rows:
                    run.handle.row_done(r)
                part.seen += len(rows)
                if state == "unknown":  # the replica restarted and lost the part
                    self._replica_lost(part.replica, "the replica restarted", restart=False)
                    continue
                self._dispatcher.progress(part.replica, part.key, part.seen, len(part.indices))
                if state == "done":
                    part.done = True
                    part.times = times
                    self._dispatcher.finished(part.replica, part.key, now)
            for run in [r for r in self._runs.values() if all(p.done for p in r.parts)]:
                self._finish(run)

    def _replica_lost(self, replica: int, why: str, restart: bool = True) -> None:
        """Re-dispatch every unanswered row the replica held (lock held)."""
        book = self._dispatcher.books[replica]
        if book.alive:
            self._dispatcher.mark_dead(replica)
            if restart and why.startswith("no answer"):  # stuck, not dead: have Ray restart it
                _ray().kill(self._actors[replica], no_restart=False)
        for run in list(self._runs.values()):
            lost = [p for p in run.parts if p.replica == replica and not p.done]
            if not lost:
                continue
            rows = []
            for p in lost:
                p.done = True
                p.poll = None
                rows += [i for i in p.indices if run.handle.row(i) is None]
            run.lost_replicas.append(replica)
            if run.handle.cancelled:
                for i in rows:
                    run.handle.row_done(RowResult(i, error="cancelled", prompt_tokens=len(run.ids[i])))
                continue
            run.redispatched += len(rows)
            if not any(b.alive for b in self._dispatcher.books):
                for i in rows:
                    run.handle.row_done(RowResult(i, error=f"every engine replica died ({why})", prompt_tokens=len(run.ids[i])))
                continue
            self._dispatch(run, rows)
        if replica not in self._revive:
            self._revive[replica] = None

    def _check_revivals(self, ray) -> None:
        """Ask dead replicas whether Ray restarted them; a restarted one takes rows again."""
        with self._lock:
            for replica, ref in list(self._revive.items()):
                if ref is None:
                    self._revive[replica] = (self._actors[replica].info.remote(), time.monotonic())
                    continue
                ref, sent = ref
                ready, _ = ray.wait([ref], timeout=0)
                if not ready:
                    continue
                try:
                    info = ray.get(ref)
                except Exception:
                    if time.monotonic() - sent > _REVIVE_S:
                        self._revive[replica] = None  # ask again
                    continue
                self._pids[replica] = info["pid"]
                self._dispatcher.mark_alive(replica)
                del self._revive[replica]

    def _finish(self, run: _Run) -> None:
        """Every row is answered: the result (lock held)."""
        self._runs.pop(run.rq.rel_id, None)
        result = finished_result(run.handle, self.policy, run.arrival, _spans(run))
        stats = result.stats
        stats.replicas = len({p.replica for p in run.parts})
        stats.redispatched_rows = run.redispatched
        result.extra["cluster"] = {
            "parts": [{"replica": p.replica, "rows": len(p.indices)} for p in run.parts],
            "lost_replicas": run.lost_replicas,
            "redispatched_rows": run.redispatched,
        }
        run.handle.finish(result)
        if not self._runs:
            self._idle.set()


def _spans(run: _Run) -> list[Span]:
    """Each part's waiting / core / tail (paper Eq. 2) as a span on our clock, placed at the time
    the part was sent (durations only: the replicas' clocks need not agree with ours)."""
    spans = []
    for p in run.parts:
        t = p.times
        if t is None:
            continue
        start = p.sent + t["waiting_s"]
        spans.append((start, start + t["core_s"], start + t["core_s"] + t["tail_s"]))
    return spans
