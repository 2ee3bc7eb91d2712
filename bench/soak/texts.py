"""The rows the clients send: short review texts, a steady share of them repeated (answered by
the result cache once seen) and the rest fresh (each run by the engine), so that the load keeps
the same mix for the whole run instead of turning into cache hits as the hour goes on."""

from __future__ import annotations

import itertools
import random
import threading

#: how many texts repeat (the first ones of the table); the others are made unique
REPEATED = 200
#: characters of a review kept: short prompts keep rows quick on 2 cores
MAX_CHARS = 160

_WORDS = ("film", "plot", "actors", "music", "ending", "story", "pace", "jokes", "scenes", "camera")
_MOODS = ("loved", "hated", "enjoyed", "could not stand", "admired", "was bored by", "laughed at")


def _reviews() -> list[str]:
    try:
        from relserve.workloads.tables import load_table

        texts = load_table("rotten_tomatoes", columns=["review_content"])["review_content"].drop_nulls().to_list()
    except Exception:  # the benchmark tables are beside the checkout, not in it: make some up
        rng = random.Random(0)
        texts = [f"I {rng.choice(_MOODS)} the {rng.choice(_WORDS)} and the {rng.choice(_WORDS)}." for _ in range(2000)]
    return [t[:MAX_CHARS] for t in texts if t.strip()]


class Texts:
    """Thread-safe source of row texts; ``draw`` never repeats a text within one request."""

    def __init__(self, repeat_share: float = 0.3) -> None:
        self.reviews = _reviews()
        self.repeat_share = repeat_share
        self._serial = itertools.count()
        self._lock = threading.Lock()

    def draw(self, rng: random.Random, n: int) -> list[str]:
        out: list[str] = []
        repeated = rng.sample(range(REPEATED), n)
        for k in range(n):
            if rng.random() < self.repeat_share:
                out.append(self.reviews[repeated[k]])
            else:
                with self._lock:
                    serial = next(self._serial)
                out.append(f"{rng.choice(self.reviews[REPEATED:])} (#{serial})")
        return out
