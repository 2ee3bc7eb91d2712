"""What a cascade did: EXPLAIN ANALYZE's figures, the server's ``stats["cascade"]``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from relserve.cascade.policy import CONFIDENCE


@dataclass
class CascadeReport:
    """What a cascade did: EXPLAIN ANALYZE's figures (``str()``) and the server's ``cascade`` stats."""

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
    #: seconds: the LLM on the sample and audit, embedding, training + scoring + choosing, the LLM on the rest
    sample_s: float = 0.0
    embed_s: float = 0.0
    learn_s: float = 0.0
    remainder_s: float = 0.0
    seed: int = 0

    @property
    def llm_rows(self) -> int:
        return self.train + self.audit + self.remainder_rows

    def as_dict(self) -> dict:
        return {**asdict(self), "llm_rows": self.llm_rows}

    @classmethod
    def from_dict(cls, d: dict) -> CascadeReport:
        """A report as the server sent it (a job's ``stats["cascade"]``)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    def __str__(self) -> str:
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
            f"    time                LLM sample {self.sample_s:.1f}s, embedding {self.embed_s:.1f}s, "
            f"training and threshold {self.learn_s:.1f}s, LLM rest {self.remainder_s:.1f}s",
        ]
        return "\n".join(lines)
