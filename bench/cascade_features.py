"""Which features a cascade's proxy should use (issue 46): the shipped sentence embedding
(all-MiniLM-L6-v2) against the served model's own hidden states (SmolLM2-135M-Instruct through
transformers, mean-pooled over the row's tokens at a middle and at the last layer).

Input: the LLM-only answers bench_cascade.py saved (``--llm-answers FILE``: the rows' texts are
rebuilt from the same table and seed). For each feature: its cost per row (rows/s on this
machine), and on random splits of the rows (``--train`` training rows, ``--audit`` audit rows,
the rest scored) the proxy's agreement with the LLM over every scored row and the share of the
rest rows the cascade's threshold lets it answer at 0.95, exactly as relserve/cascade/ does it.

    .venv/bin/python bench/cascade_features.py --task topic --llm-answers bench/out/cascade_llm_topic_3000.json \
        --rows 3000 --sample 3000 --seeds 5
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


class HiddenStates:
    """The served model's hidden states of the row's text, mean-pooled at ``layer``."""

    def __init__(self, layer: int) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        from relserve.model import resolve_model

        path = resolve_model("smollm2").path
        self.name = f"SmolLM2-135M layer {layer}"
        self.layer = layer
        self.tok = AutoTokenizer.from_pretrained(path)
        self.tok.padding_side = "right"
        if self.tok.pad_token is None:
            self.tok.pad_token = self.tok.eos_token
        self.model = AutoModel.from_pretrained(path, dtype=torch.float32).eval()

    def embed(self, texts):
        import torch

        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.model.config.hidden_size), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(order), 32):
                batch = order[start : start + 32]
                enc = self.tok([texts[i] for i in batch], padding=True, truncation=True, max_length=256, return_tensors="pt")
                hidden = self.model(**enc, output_hidden_states=True).hidden_states[self.layer]
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                out[batch] = ((hidden * mask).sum(1) / mask.sum(1)).numpy()
        return out


def evaluate(x: np.ndarray, answers: list[str], labels: list[str], *, train: int, audit: int, seeds: int) -> dict:
    from relserve.cascade import proxy, threshold

    n = len(answers)
    agree, coverage = [], []
    for seed in range(seeds):
        order = np.random.default_rng(seed).permutation(n)
        tr, au, rest = order[:train], order[train : train + audit], order[train + audit :]
        model = proxy.fit(x[tr], [answers[i] for i in tr], labels, seed=seed)
        got, conf = model.predict(x[np.concatenate([au, rest])])
        truth = [answers[i] for i in np.concatenate([au, rest])]
        agree.append(float(np.mean([g == t for g, t in zip(got, truth)])))
        choice = threshold.choose(conf[: len(au)], np.array([g == t for g, t in zip(got[: len(au)], truth[: len(au)])]),
                                  conf[len(au) :], rows=n, target=0.95)
        coverage.append(choice.coverage)
    return {"agreement": float(np.mean(agree)), "coverage_at_0.95": float(np.mean(coverage))}


def main() -> None:
    from bench_cascade import TASKS, reviews

    from relserve.cascade.embedding import SentenceEmbedder, row_texts

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llm-answers", type=Path, required=True)
    ap.add_argument("--task", choices=sorted(TASKS), default="sentiment")
    ap.add_argument("--rows", type=int, default=20_000, help="the table the answers are of")
    ap.add_argument("--sample", type=int, default=3000, help="rows measured (the hidden states cost an LLM row each)")
    ap.add_argument("--train", type=int, default=600, help="the policy's training rows at 20,000 rows")
    ap.add_argument("--audit", type=int, default=800, help="the policy's audit rows at 20,000 rows")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--layers", default="15,30")
    args = ap.parse_args()
    task = TASKS[args.task]
    llm = json.loads(args.llm_answers.read_text())
    texts = reviews(args.rows, beer=task["beer"], rare=task.get("rare"))
    keep = [i for i, v in enumerate(llm["values"]) if v is not None][: args.sample]
    labels = task["labels"] or ["yes", "no"]
    answers = [llm["values"][i] if task["labels"] else ("yes" if llm["values"][i] else "no") for i in keep]
    prompts = [task["template"].replace("{review}", texts[i]) for i in keep]
    rows = row_texts(prompts)
    train = min(args.train, len(keep) // 4)
    audit = min(args.audit, len(keep) // 3)
    results = {}
    for make in [SentenceEmbedder] + [lambda layer=int(s): HiddenStates(layer) for s in args.layers.split(",")]:
        embedder = make()
        embedder.embed(rows[:8])  # warm
        t0 = time.perf_counter()
        x = np.concatenate([embedder.embed(rows[i : i + 1024]) for i in range(0, len(rows), 1024)])
        seconds = time.perf_counter() - t0
        found = evaluate(x, answers, labels, train=train, audit=audit, seeds=args.seeds)
        results[embedder.name] = {"rows_per_s": len(rows) / seconds, **found}
        print(f"{embedder.name}: {len(rows) / seconds:.1f} rows/s, proxy agreement with the LLM {found['agreement']:.2%}, "
              f"rest answered at 0.95: {found['coverage_at_0.95']:.1%} (train {train}, audit {audit}, {args.seeds} splits)",
              flush=True)
    out = ROOT / "bench" / "out" / f"cascade_features_{args.task}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": len(keep), "train": train, "audit": audit, "results": results}, indent=1))


if __name__ == "__main__":
    main()
