"""A cascade's rows embedded while the engine answers its sample (the ``OVERLAP`` switch).

Embedding is the proxy's largest cost after the LLM's rows (149 s of a 1,033 s cascade over
20,000 rows: docs/benchmarks.md), and it needs nothing the sample's answers give: the rows'
texts are known before the sample runs. So a background thread embeds them, the sample's rows
first, while the engine (its own process) answers the sample; ``learn`` then reads the vectors
instead of computing them. The encoder runs on ``THREADS`` torch threads meanwhile, so that it
takes a share of the cores instead of all of them from the engine.

Memory stays bounded: at most ``LIMIT`` rows are held, as float16 (384 dimensions: 77 MB at
100,000 rows); rows past the limit are embedded when asked, as without the overlap. Asking for
a vector waits for the thread to finish (it would otherwise embed the same rows twice).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np

from relserve.cascade.embedding import CHUNK, Embedder

#: whether cascades embed their rows beside the sample's relQuery
OVERLAP = True
#: the most rows held (float16)
LIMIT = 200_000
#: torch threads of the encoder while it runs beside the engine (None: torch's own)
THREADS: int | None = 1


class Prefetched:
    """An ``Embedder`` whose vectors for ``texts`` are computed ahead on a background thread."""

    def __init__(self, inner: Embedder, texts: Sequence[str], *, limit: int = LIMIT, threads: int | None = THREADS):
        self.name = inner.name
        self.inner = inner
        self._texts = list(dict.fromkeys(texts[:limit]))
        self._index = {t: i for i, t in enumerate(self._texts)}
        self._vectors: np.ndarray | None = None
        self._done = 0
        self._threads = threads
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cascade-prefetch", daemon=True)
        self._error: BaseException | None = None
        #: seconds the thread spent embedding, and when it finished (perf_counter; None: not yet)
        self.seconds = 0.0
        self.finished_at: float | None = None

    def start(self) -> Prefetched:
        self._thread.start()
        return self

    def _run(self) -> None:
        previous = None
        try:
            if self._threads is not None:
                import torch

                previous = torch.get_num_threads()
                torch.set_num_threads(self._threads)
            t0 = time.perf_counter()
            for start in range(0, len(self._texts), CHUNK):
                if self._stop.is_set():
                    break
                x = self.inner.embed(self._texts[start : start + CHUNK])
                if self._vectors is None:
                    self._vectors = np.empty((len(self._texts), x.shape[1]), dtype=np.float16)
                self._vectors[start : start + len(x)] = x
                self._done = start + len(x)
            self.seconds = time.perf_counter() - t0
        except BaseException as e:  # noqa: BLE001 - re-raised by ``embed`` in the caller's thread
            self._error = e
        finally:
            if previous is not None:
                import torch

                torch.set_num_threads(previous)
            self.finished_at = time.perf_counter()

    def stop(self) -> None:
        """Stop embedding (a cancelled call); vectors already made stay readable."""
        self._stop.set()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self._thread.is_alive() or self._thread.ident is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        where = [self._index.get(t, -1) for t in texts]
        missing = [i for i, w in enumerate(where) if w < 0 or w >= self._done]
        out = np.empty((len(texts), self._vectors.shape[1] if self._vectors is not None else 0), dtype=np.float32)
        if missing:
            fresh = self.inner.embed([texts[i] for i in missing])
            if out.shape[1] == 0:
                out = np.empty((len(texts), fresh.shape[1]), dtype=np.float32)
            out[missing] = fresh
        have = [i for i, w in enumerate(where) if 0 <= w < self._done]
        if have:
            out[have] = self._vectors[[where[i] for i in have]]
        return out
