"""What a cascade did: EXPLAIN ANALYZE's figures, the server's ``stats["cascade"]``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from relserve.cascade.policy import CONFIDENCE


@dataclass
class TargetFigures:
    """What a recall / precision cascade's audit and zones were (relserve/cascade/audit.py, zones.py)."""

    recall: float | None
    precision: float | None
    failure: float
    #: the audit's strata: rows the LLM answered whole, the "no" candidates and those drawn, the
    #: "yes" candidates and those drawn
    census: int = 0
    low_rows: int = 0
    low_drawn: int = 0
    high_rows: int = 0
    high_drawn: int = 0
    #: the "yes" rows the proxy expected above the "no" candidates and among them
    expected_kept: float = 0.0
    expected_missed: float = 0.0
    #: kept "yes" rows the recall test counted
    known_positives: int = 0
    #: the proxy's "no" zone: its rows, its highest score, the bound on the LLM "yes" rows it may
    #: hold and the recall that leaves (None: no zone, ``recall_reason`` says why)
    no_rows: int = 0
    no_threshold: float | None = None
    misses_bound: int | None = None
    recall_low: float | None = None
    recall_reason: str | None = None
    #: the proxy's "yes" zone: its rows, its lowest score, the bound on its LLM "no" rows, the precision
    yes_rows: int = 0
    yes_threshold: float | None = None
    false_bound: int | None = None
    precision_low: float | None = None
    precision_reason: str | None = None

    def lines(self) -> list[str]:
        asked = " and ".join(f"{n} {v:g}" for n, v in (("recall", self.recall), ("precision", self.precision))
                             if v is not None)
        out = [f"    audit               {self.census + self.low_drawn + self.high_drawn:>10,}   rows the LLM answered, "
               f"sampled by the proxy's score: {self.census:,} whole (the census)"
               + (f", {self.low_drawn:,} of {self.low_rows:,} 'no' candidates" if self.recall is not None else "")
               + (f", {self.high_drawn:,} of {self.high_rows:,} 'yes' candidates" if self.precision is not None else "")]
        if self.recall is not None:
            if self.no_rows or self.misses_bound is not None:
                out.append(f"    'no' zone           {self.no_rows:>10,}   answered 'no' by the proxy (score <= "
                           f"{self.no_threshold:.4f}); at most {self.misses_bound:,} of them the LLM's 'yes', so "
                           f"recall >= {self.recall_low:.2%} ({self.known_positives:,} kept 'yes' rows known)")
            else:
                out.append(f"    'no' zone           {0:>10,}   ({self.recall_reason})")
        if self.precision is not None:
            if self.yes_rows or self.false_bound is not None:
                out.append(f"    'yes' zone          {self.yes_rows:>10,}   answered 'yes' by the proxy (score >= "
                           f"{self.yes_threshold:.4f}); at most {self.false_bound:,} of its candidates the LLM's 'no', "
                           f"so precision >= {self.precision_low:.2%}")
            else:
                out.append(f"    'yes' zone          {0:>10,}   ({self.precision_reason})")
        out.insert(0, f"  cascade               {asked} of the 'yes' rows against the LLM's own answers, with "
                      f"probability >= {1 - self.failure:.0%}")
        return out


@dataclass
class CascadeReport:
    """What a cascade did: EXPLAIN ANALYZE's figures (``str()``) and the server's ``cascade`` stats."""

    #: the agreement target (0: a recall / precision cascade, ``targets``)
    target: float
    #: distinct prompts the cascade was over
    rows: int
    train: int
    audit: int
    #: training / audit rows the LLM answered (a failed row is left out of both)
    train_answered: int = 0
    audit_answered: int = 0
    #: the confidence threshold chosen (None: the proxy answered no row)
    threshold: float | None = None
    proxy_rows: int = 0
    #: rows the LLM answered after the proxy (the rest below the threshold)
    remainder_rows: int = 0
    agreement: float | None = None
    agreement_low: float | None = None
    agreement_high: float | None = None
    confidence: float = CONFIDENCE
    #: share of the rest rows the proxy answers at the threshold
    coverage: float = 0.0
    #: the audit's halves: the rows that chose the threshold, the rows that estimate the agreement
    chose_rows: int = 0
    estimate_rows: int = 0
    #: rows of the estimating half the proxy would answer at the threshold, and those it got wrong
    audit_covered: int = 0
    audit_wrong: int = 0
    #: why every row went to the LLM (None: the proxy answered some)
    fallback: str | None = None
    embedder: str = ""
    #: the penalty cross-validation chose for the proxy
    penalty: float | None = None
    #: seconds: the LLM on the sample (and the agreement's audit), embedding, training + scoring +
    #: choosing, the LLM on a targets cascade's audit, the LLM on the rest
    sample_s: float = 0.0
    embed_s: float = 0.0
    learn_s: float = 0.0
    audit_s: float = 0.0
    remainder_s: float = 0.0
    #: seconds the encoder ran beside the LLM's sample (relserve/cascade/prefetch.py); ``embed_s``
    #: is then only what was left to embed after the sample
    prefetch_s: float = 0.0
    seed: int = 0
    #: a recall / precision cascade's figures (None: an agreement cascade)
    targets: TargetFigures | None = None

    @property
    def llm_rows(self) -> int:
        return self.train + self.audit + self.remainder_rows

    def as_dict(self) -> dict:
        return {**asdict(self), "llm_rows": self.llm_rows}

    @classmethod
    def from_dict(cls, d: dict) -> CascadeReport:
        """A report as the server sent it (a job's ``stats["cascade"]``)."""
        known = {f.name for f in fields(cls)}
        got = {k: v for k, v in d.items() if k in known}
        if isinstance(got.get("targets"), dict):
            inner = {f.name for f in fields(TargetFigures)}
            got["targets"] = TargetFigures(**{k: v for k, v in got["targets"].items() if k in inner})
        return cls(**got)

    def _time(self) -> str:
        audit = f", LLM audit {self.audit_s:.1f}s" if self.targets is not None else ""
        beside = f" (+{self.prefetch_s:.1f}s beside the LLM's sample)" if self.prefetch_s else ""
        return (f"    time                LLM sample {self.sample_s:.1f}s, embedding {self.embed_s:.1f}s{beside}, "
                f"training and threshold {self.learn_s:.1f}s{audit}, LLM rest {self.remainder_s:.1f}s")

    def __str__(self) -> str:
        if self.targets is not None:
            t = self.targets
            lines = t.lines()
            lines.insert(1, f"    sample              {self.train:>10,}   rows the LLM answered to train the proxy "
                            f"({self.train_answered:,} usable)")
            if self.fallback:
                lines.append(f"    proxy rows          {0:>10,}   (every row to the LLM: {self.fallback})")
            else:
                lines.append(f"    proxy rows          {self.proxy_rows:>10,}   answered by the proxy ({self.embedder} + "
                             f"logistic regression)")
            lines += [f"    LLM rows            {self.llm_rows:>10,}   of {self.rows:,} ({self.remainder_rows:,} after the "
                      f"proxy)", self._time()]
            return "\n".join(lines)
        lines = [
            f"  cascade               target {self.target:g} (agreement with the LLM's own answers, {self.confidence:.0%} confidence)",
            f"    sample              {self.train:>10,}   rows the LLM answered to train the proxy ({self.train_answered:,} usable)",
            f"    audit               {self.audit:>10,}   rows the LLM answered to check it ({self.audit_answered:,} usable)",
        ]
        if self.threshold is None:
            lines.append(f"    proxy rows          {0:>10,}   (every row to the LLM: {self.fallback})")
        else:
            lines += [
                f"    threshold           {self.threshold:>10.4f}   (proxy confidence, chosen on {self.chose_rows:,} audit rows; "
                f"of the other {self.estimate_rows:,}, {self.audit_covered:,} at or above it, {self.audit_wrong:,} answered "
                f"unlike the LLM)",
                f"    proxy rows          {self.proxy_rows:>10,}   answered by the proxy ({self.embedder} + logistic regression)",
                f"    estimated agreement {self.agreement:>10.2%}   ({self.confidence:.0%} interval "
                f"{self.agreement_low:.2%} - {self.agreement_high:.2%})",
            ]
        lines += [
            f"    LLM rows            {self.llm_rows:>10,}   of {self.rows:,} ({self.remainder_rows:,} after the proxy)",
            self._time(),
        ]
        return "\n".join(lines)
