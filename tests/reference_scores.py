"""Label scores computed outside relserve, for the operators' value tests (not a test module).

``ReferenceScorer`` runs the saved model with transformers (as tests/golden/make_golden.py does)
on the text a scoring request is laid out as (relserve/prompt_shapes.py documents the layouts:
the chat template around the prompt, or the prompt, a newline and the answer field) and reads
each label's next-token log-probabilities: a label's score is the log of the summed probability
of its spellings as written and capitalised, as relserve's "split" norm reads one-token labels.

``ScoreRecorder`` wraps the real engine and keeps every relQuery it is given, so a test knows the
exact prompts an operator sent and the engine's answers to them.
"""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass
from typing import Any

from waits import result_within

from relserve.errors import RowError


@dataclass
class ScoredRelQuery:
    """One scoring relQuery as the engine got it: each row's prompt and label log-probabilities."""

    rel_id: str
    labels: tuple[str, ...]
    prompts: list[str]
    shape: str
    answer_field: str
    system: str | None
    handle: Any

    def engine_logprobs(self) -> list[dict[str, float] | None]:
        return [r.label_logprobs for r in result_within(self.handle, 300, "a scored relQuery the recorder saw").rows]


class ScoreRecorder:
    """The real engine, keeping every relQuery it is given (its prompts, and its handle to read
    the answers from), in submission order; takes a tenancy too, so a server can use it."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.recorded: list[ScoredRelQuery] = []
        self._lock = threading.Lock()

    def submit(self, rq: Any, *args: Any, **kwargs: Any) -> Any:
        handle = self._engine.submit(rq, *args, **kwargs)
        prompts = [p if not isinstance(p, RowError) else "" for p in rq.render()]
        with self._lock:
            self.recorded.append(ScoredRelQuery(rq.rel_id, tuple(rq.choices or ()), prompts, rq.prompt_shape,
                                                rq.answer_field, rq.system, handle))
        return handle

    def _rows(self) -> list[ScoredRelQuery]:
        with self._lock:
            return [s for s in self.recorded if not s.rel_id.startswith(("calibrate-", "bootstrap-", "answer-field-"))]

    def relqueries(self, labels: tuple[str, ...]) -> list[ScoredRelQuery]:
        """The relQueries of the rows (no probes, no first passes) asking for these labels."""
        return [s for s in self._rows() if s.labels == labels]

    @property
    def submitted(self) -> list[list[str]]:
        """Prompts of every relQuery of rows, in submission order."""
        return [s.prompts for s in self._rows()]

    @property
    def answers(self) -> dict[str, str | None]:
        """prompt -> the engine's answer text, over every relQuery of rows (waits for them)."""
        out: dict[str, str | None] = {}
        for s in self._rows():
            for row in result_within(s.handle, 300, "a relQuery of rows the recorder saw").rows:
                out[s.prompts[row.index]] = row.text
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


class ReferenceScorer:
    def __init__(self, model_path: str) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32, attn_implementation="eager")
        self.model.eval()

    def text(self, rq: ScoredRelQuery, prompt: str) -> tuple[str, str]:
        """The text the scoring request continues, and what stands before a label in it."""
        if rq.shape in ("chat", "chat_answer"):
            messages = ([{"role": "system", "content": rq.system}] if rq.system else []) + [{"role": "user", "content": prompt}]
            chat = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return (chat, "") if rq.shape == "chat" else (chat + rq.answer_field, " ")
        head = rq.system + "\n\n" if rq.system else ""
        return head + prompt + "\n" + rq.answer_field, " "

    def label_logprobs(self, rq: ScoredRelQuery, prompt: str) -> dict[str, float]:
        """Each label's score, normalised over the labels (one-token spellings only)."""
        text, space = self.text(rq, prompt)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        with self._torch.no_grad():
            logits = self.model(self._torch.tensor([ids])).logits[0, -1]
        lp = self._torch.log_softmax(logits.double(), dim=-1)
        raw = {}
        for label in rq.labels:
            forms = {label, label[:1].upper() + label[1:]}
            per_form = []
            for form in forms:
                tok = self.tokenizer(space + form, add_special_tokens=False)["input_ids"]
                assert len(tok) == 1, f"the reference reads one-token labels; {space + form!r} is {tok}"
                per_form.append(float(lp[tok[0]]))
            raw[label] = math.log(sum(math.exp(x) for x in per_form))
        total = math.log(sum(math.exp(x) for x in raw.values()))
        return {label: r - total for label, r in raw.items()}

    def margins(self, rq: ScoredRelQuery) -> list[float]:
        """Per prompt of ``rq``: the first label's score less the second's."""
        a, b = rq.labels[:2]
        out = []
        for p in rq.prompts:
            lps = self.label_logprobs(rq, p)
            out.append(lps[a] - lps[b])
        return out


def reference_topk(scorer: ReferenceScorer, recorder: ScoreRecorder, values: list[str | None], k: int,
                   pool: int | None = None, gap: float = 0.05) -> list[int]:
    """The positions of the top k of ``values`` as llm_topk's rounds define them, every score
    computed by ``scorer`` on the prompts the operator sent (its score round: the value's prompt;
    its compare round: the prompt of each ordered pair of the pool). Fails naming a decision the
    reference takes by less than ``gap`` (too close to call between two float32 kernels)."""
    (score_rq,) = recorder.relqueries(("yes", "no"))
    present = [i for i, v in enumerate(values) if v is not None]
    # a value's prompt is the one holding its text (the test's values are not part of one another)
    margin = dict(zip(score_rq.prompts, scorer.margins(score_rq)))
    scores: dict[int, float] = {}
    first_of: dict[str, int] = {}
    for i in present:
        holding = [p for p in score_rq.prompts if values[i] in p]
        assert len(holding) == 1, f"value {values[i]!r} is in {len(holding)} of the score round's prompts"
        scores[i] = margin[holding[0]]
        first_of.setdefault(values[i], i)
    candidates = sorted(first_of.values(), key=lambda i: (-scores[i], i))
    size = min(len(candidates), pool if pool is not None else 2 * k)
    for a, b in zip(candidates[size - 1 : size], candidates[size : size + 1]):
        assert scores[a] - scores[b] > gap, f"the pool's edge is a near tie: {values[a]!r} {scores[a]:.4f} / {values[b]!r} {scores[b]:.4f}"
    chosen = candidates[:size]
    if size <= k:
        return chosen
    (compare_rq,) = recorder.relqueries(("first", "second"))
    cmp_margin = dict(zip(compare_rq.prompts, scorer.margins(compare_rq)))

    def asked(a: int, b: int) -> float:
        # the prompt naming a's text "First" and b's "Second" (a long value may be moved in front
        # of the question, named by its field: the fields, not the positions, say which is which)
        texts = [p for p in compare_rq.prompts
                 if re.search(r"First:\s*" + re.escape(values[a]), p) and re.search(r"Second:\s*" + re.escape(values[b]), p)]
        assert len(texts) == 1, f"the compare round asked ({values[a]!r}, {values[b]!r}) {len(texts)} times"
        return cmp_margin[texts[0]]

    wins = dict.fromkeys(chosen, 0)
    for x, a in enumerate(chosen):
        for b in chosen[x + 1 :]:
            m = asked(a, b) - asked(b, a)
            assert abs(m) > gap, f"{values[a]!r} against {values[b]!r} is a near tie ({m:.4f})"
            wins[a if m > 0 else b] += 1
    return sorted(chosen, key=lambda i: (-wins[i], -scores[i], i))[:k]
