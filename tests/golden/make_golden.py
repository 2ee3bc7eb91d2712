"""Regenerate the golden answers in this folder with transformers, outside relserve.

Why: every other real-engine test takes its expectation from the engine itself (a row's answer
equals the answer the engine gives that prompt alone, ...), so a broken chat template, prompt
encoding or label scorer would pass all of them. These files pin what the default model
(SmolLM2-135M-Instruct as ``relserve model prepare`` saves it: float32 safetensors) answers when
run directly with transformers on the same saved weights, with the tokenizer's own chat template:

* ``greedy.json``: the chat-templated prompt's token ids and the greedy answer's token ids (up to
  ``max_tokens``, the end-of-text token included when the model stops), with the smallest gap
  between the best and second-best logit over the answer's steps (a gap near 0 would make the
  answer depend on floating-point noise, so such prompts are not used);
* ``labels.json``: for closed questions, every label's score as relserve defines it
  (relserve/engine/label_scoring.py: each spelling of a label, as written and capitalised, scored
  by the mean log-probability of its tokens, the end token added to a spelling that is a proper
  prefix of another; the spellings' scores log-sum-exp'd; log-softmax over the labels), computed
  here from the model's full next-token distribution with teacher forcing, not from vLLM.

tests/test_golden.py checks the real engine against these files. Regenerate only when the model
or its preparation changes (the files record the weights' SHA-256; the test names a mismatch):

    .venv/bin/python tests/golden/make_golden.py          # write greedy.json and labels.json
    .venv/bin/python tests/golden/make_golden.py --check  # recompute and compare, write nothing
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: (prompt, system message or None, max_tokens)
GREEDY_PROMPTS = [
    ("What is the capital of France?", None, 16),
    ("Repeat this word three times, separated by spaces: apple", None, 12),
    ("Is this review positive? I loved every minute.", None, 12),
    ("Name three colours.", "You are a terse assistant. Answer in as few words as possible.", 16),
]

#: (prompt, labels, prompt shape); shapes as in relserve/prompt_shapes.py: "chat" puts the chat
#: template around the prompt and scores the label as the assistant's first words; "completion"
#: uses no template: prompt + "\nAnswer:", the label scored after a space
LABEL_PROMPTS = [
    ("Is this review positive? A wonderful, moving film.", ["yes", "no"], "chat"),
    ("Sentiment of: Boring and far too long.", ["positive", "negative", "neutral"], "chat"),
    ("Which animal is this about? The cat purred on the sofa all afternoon.", ["cat", "dog", "horse", "caterpillar"], "chat"),
    ("Review: Boring and far too long.\nIs the review above positive?", ["yes", "no"], "completion"),
]


def weights_sha256(folder: Path) -> str:
    h = hashlib.sha256()
    with open(folder / "model.safetensors", "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load(folder: Path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return tok, model


def chat_ids(tok, prompt: str, system: str | None) -> list[int]:
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tok(text, add_special_tokens=False)["input_ids"]


def next_logprobs(model, ids: list[int]):
    """log p(next token | ids[:k+1]) for every k: one forward pass, float64 log-softmax."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    return torch.log_softmax(logits, dim=-1), logits


def greedy(tok, model, prompt: str, system: str | None, max_tokens: int) -> dict:
    ids = chat_ids(tok, prompt, system)
    out: list[int] = []
    gaps = []
    for _ in range(max_tokens):
        _, logits = next_logprobs(model, ids + out)
        top = logits[-1].topk(2)
        gaps.append(float(top.values[0] - top.values[1]))
        t = int(top.indices[0])
        out.append(t)
        if t == tok.eos_token_id:
            break
    return {
        "prompt": prompt,
        "system": system,
        "max_tokens": max_tokens,
        "prompt_token_ids": ids,
        "answer_token_ids": out,
        "answer_text": tok.decode(out, skip_special_tokens=True),
        "min_logit_gap": min(gaps),
    }


def label_scores(tok, model, prompt: str, labels: list[str], shape: str) -> dict:
    if shape == "chat":
        ids, space = chat_ids(tok, prompt, None), ""
    elif shape == "completion":
        ids, space = tok(prompt + "\nAnswer:", add_special_tokens=False)["input_ids"], " "
    else:
        raise ValueError(shape)
    forms = {lab: [lab] + ([lab[:1].upper() + lab[1:]] if lab[:1].upper() != lab[:1] else []) for lab in labels}
    seqs = {f: tuple(tok(space + f, add_special_tokens=False)["input_ids"]) for fs in forms.values() for f in fs}
    proper_prefixes = {s[:k] for s in seqs.values() for k in range(1, len(s))}
    seqs = {f: s + ((tok.eos_token_id,) if s in proper_prefixes else ()) for f, s in seqs.items()}
    token_logprobs = {}
    for f, s in seqs.items():
        lp, _ = next_logprobs(model, ids + list(s))
        n = len(ids)
        token_logprobs[f] = [float(lp[n - 1 + k, s[k]]) for k in range(len(s))]
    raw = {}
    for lab, fs in forms.items():
        per_form = [sum(token_logprobs[f]) / len(token_logprobs[f]) for f in fs]  # mean over tokens
        m = max(per_form)
        raw[lab] = m + math.log(sum(math.exp(x - m) for x in per_form))
    m = max(raw.values())
    total = m + math.log(sum(math.exp(x - m) for x in raw.values()))
    return {
        "prompt": prompt,
        "labels": labels,
        "prompt_shape": shape,
        "prompt_token_ids": ids,
        "form_token_ids": {f: list(s) for f, s in seqs.items()},
        "form_token_logprobs": token_logprobs,
        "label_logprobs": {lab: raw[lab] - total for lab in labels},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="recompute and compare with the files; write nothing")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from relserve.model import resolve_model

    folder = Path(resolve_model().path)
    tok, model = load(folder)
    import transformers

    meta = {"model": folder.name, "weights_sha256": weights_sha256(folder), "transformers": transformers.__version__,
            "made_by": "tests/golden/make_golden.py"}
    greedy_doc = {**meta, "cases": [greedy(tok, model, p, s, n) for p, s, n in GREEDY_PROMPTS]}
    labels_doc = {**meta, "cases": [label_scores(tok, model, p, labs, shape) for p, labs, shape in LABEL_PROMPTS]}
    for c in greedy_doc["cases"]:
        print(f"{c['answer_text']!r:60} gap {c['min_logit_gap']:.3f}")
        if c["min_logit_gap"] < 0.01:
            print("  ^ near-tie: pick another prompt", file=sys.stderr)
    for c in labels_doc["cases"]:
        print({k: round(v, 4) for k, v in c["label_logprobs"].items()})
    if args.check:
        bad = 0
        for name, doc in (("greedy.json", greedy_doc), ("labels.json", labels_doc)):
            pinned = json.loads((HERE / name).read_text())
            for new, old in zip(doc["cases"], pinned["cases"]):
                same = (new["answer_token_ids"] == old["answer_token_ids"]) if "answer_token_ids" in new else all(
                    abs(new["label_logprobs"][k] - old["label_logprobs"][k]) < 1e-4 for k in new["label_logprobs"])
                if not same or new["prompt_token_ids"] != old["prompt_token_ids"]:
                    bad += 1
                    print(f"{name}: differs for {new['prompt']!r}", file=sys.stderr)
        return 1 if bad else 0
    for name, doc in (("greedy.json", greedy_doc), ("labels.json", labels_doc)):
        (HERE / name).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
