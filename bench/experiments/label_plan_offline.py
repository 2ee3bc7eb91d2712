"""Experiment (issue 62): label plans decided offline on the dumps of label_plan_probe.py.

A plan is chosen from a spread sample of a task's rows (its layout, its boundary in margin units);
then every row is decided alone against it. Prints per task and rule: the chosen layout, its AUC,
kept/true and F1 of "yes" (or accuracy for balanced tasks), and F1 of a random choice of the same
size.

    python bench/experiments/label_plan_offline.py bench/out/plan_probe_bf16.json [--rules a,b] [--sample 32]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from relserve.labels.information import mutual_information  # noqa: E402


def auc(scores, truth) -> float:
    s, t = np.asarray(scores, float), np.asarray(truth, bool)
    if t.all() or not t.any():
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    ranks[order] = np.arange(1, len(s) + 1)
    # ties: average ranks
    for v in np.unique(s):
        m = s == v
        if m.sum() > 1:
            ranks[m] = ranks[m].mean()
    return float((ranks[t].sum() - t.sum() * (t.sum() + 1) / 2) / (t.sum() * (~t).sum()))


def f1(kept, truth) -> float:
    kept, truth = np.asarray(kept, bool), np.asarray(truth, bool)
    tp = (kept & truth).sum()
    if tp == 0:
        return 0.0
    p, r = tp / kept.sum(), tp / truth.sum()
    return float(2 * p * r / (p + r))


def random_f1(k: int, t: int, n: int) -> float:
    return 2 * t * k / (n * (t + k)) if k + t else 0.0


def margins_of(layout: dict) -> tuple[np.ndarray, np.ndarray]:
    a, b = layout["labels"][:2]
    m = np.array([r[a] - r[b] if r else np.nan for r in layout["rows"]])
    c = np.array([r[a] - r[b] if r else np.nan for r in layout["content_free"]])
    return m, c


def spread(n: int, k: int) -> list[int]:
    return [i * n // k for i in range(k)] if n > k else list(range(n))


def spearman(x, y) -> float:
    rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
    return float(np.corrcoef(rx, ry)[0, 1])


def load(paths):
    data = {}
    for p in paths:
        data.update(json.loads(Path(p).read_text()))
    return data


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dumps", nargs="+")
    ap.add_argument("--sample", type=int, default=32)
    ap.add_argument("--tasks", default="")
    args = ap.parse_args()
    data = load(args.dumps)
    for name, task in data.items():
        if args.tasks and name not in args.tasks.split(","):
            continue
        truth = np.asarray(task["truth"], bool)
        n = len(truth)
        idx = spread(n, args.sample)
        print(f"\n== {name} ({task['group']}) prevalence {truth.mean():.3f} n={n}")
        ms = {}
        for lname, lay in task["layouts"].items():
            m, c = margins_of(lay)
            ms[lname] = m
            s = m[idx]
            print(f"  {lname:40} AUC {auc(m, truth):.2f}  MI(sample) {mutual_information(list(s)):.3f}  "
                  f"cf {np.nanmean(c):+.2f} [{', '.join(f'{x:+.1f}' for x in c)}]  median {np.nanmedian(m):+.2f}  "
                  f"kept@cf {(m > np.nanmean(c)).mean():.2f} kept@0 {(m > 0).mean():.2f}")
        names = list(ms)
        corr = np.array([[spearman(ms[a][idx], ms[b][idx]) for b in names] for a in names])
        print("  rank agreement on the sample (Spearman):")
        for a, row in zip(names, corr):
            print(f"    {a:40} " + " ".join(f"{x:+.2f}" for x in row))


# -- rules: a plan from the sample, every row decided alone ---------------------------------------

def boundary_of(rule: str, m_sample: np.ndarray, cf: np.ndarray, dc: np.ndarray | None) -> tuple[float, str]:
    """The boundary in margin units a rule reads from the sample (and the probes)."""
    from relserve.labels.decide import read_boundary

    s = [x for x in m_sample if np.isfinite(x)]
    base, _, fallback = rule.partition("|")
    if base == "mix":
        b = read_boundary(s)
        if b.rule.value in ("two crowds", "all alike"):
            return b.value, b.rule.value
        base = fallback
    if base == "eighth":
        ref = sorted(s)
        k = min(len(ref) - 1, max(1, round((1 - 0.125) * len(ref))))
        return (ref[k - 1] + ref[k]) / 2, "eighth"
    if base == "cf":
        return float(np.nanmean(cf)), "cf"
    if base == "dc":
        return float(np.nanmean(dc)), "dc"
    if base == "zero":
        return 0.0, "zero"
    if base == "median":
        return float(np.median(s)), "median"
    raise SystemExit(f"unknown rule {rule}")


def evaluate(data: dict, rules: list[str], sample: int, only: str = "", show: bool = True) -> dict:
    out = {}
    for name, task in data.items():
        if only and name not in only.split(","):
            continue
        truth = np.asarray(task["truth"], bool)
        n = len(truth)
        idx = spread(n, sample)
        infos = {}
        for lname, lay in task["layouts"].items():
            m, _ = margins_of(lay)
            infos[lname] = mutual_information(list(m[idx]))
        chosen = max(infos, key=lambda k: (round(infos[k], 9), -list(infos).index(k)))
        lay = task["layouts"][chosen]
        m, cf = margins_of(lay)
        dc = None
        if "domain" in lay:
            a, b = lay["labels"][:2]
            dc = np.array([r[a] - r[b] for r in lay["domain"] if r])
        res = {}
        for rule in rules:
            t, how = boundary_of(rule, m[idx], cf, dc)
            kept = m > t
            res[rule] = dict(kept=int(kept.sum()), true=int(truth.sum()), f1=f1(kept, truth),
                             acc=float((kept == truth).mean()), how=how,
                             rand=random_f1(int(kept.sum()), int(truth.sum()), n))
        out[name] = dict(group=task["group"], prevalence=float(truth.mean()), layout=chosen, auc=auc(m, truth),
                         best_auc=max(auc(margins_of(L)[0], truth) for L in task["layouts"].values()), rules=res)
        if show:
            cells = " | ".join(f"{r}: {v['kept'] / max(v['true'], 1):4.2f}x F1 {v['f1']:.2f}{'<' if v['f1'] < v['rand'] else ' '}"
                               f"({v['how'][:4]})" for r, v in res.items())
            print(f"{name:20} {task['group'][:5]} {truth.mean():.2f} {chosen[5:30]:25} AUC {out[name]['auc']:.2f} | {cells}")
    return out


def rules_main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dumps", nargs="+")
    ap.add_argument("--sample", type=int, default=32)
    ap.add_argument("--rules", default="mix|eighth,mix|cf,mix|dc,cf,zero")
    ap.add_argument("--tasks", default="")
    args = ap.parse_args()
    evaluate(load(args.dumps), args.rules.split(","), args.sample, args.tasks)


if __name__ == "__main__":
    rules_main() if "--rules" in sys.argv else main()
