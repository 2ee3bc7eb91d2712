"""The scheduler plug-in's step log entry: it crosses the RPC as JSON and back unchanged, and a log
an older plug-in saved (fewer fields) still reads."""

from __future__ import annotations

import json

from relserve.engine.step_record import RelQueryCounts, StepRecord


def test_a_record_crosses_json_and_back_unchanged():
    rec = StepRecord(kind="mixed", reason="mixed", prefill_tokens=64, prefill_reqs=2, prefill_pairs=2080.0,
                     decode_reqs=3, decode_context=300, policy_s=0.001, start=5.0, entered=4.99, schedule_s=0.01,
                     planned_admit=2, held=1, waiting=4, running=5, free_blocks=10,
                     relqueries=RelQueryCounts(prefilled={"A": 2}, decoded={"B": 3}, starved=("A",)),
                     duration=0.03, seq=7)
    wire = json.loads(json.dumps(rec.to_dict()))
    assert wire["relqueries"]["starved"] == ["A"] and wire["seq"] == 7 and wire["held"] == 1
    assert StepRecord.from_dict(wire) == rec


def test_an_older_log_without_the_later_fields_still_reads():
    old = {"kind": "prefill", "reason": "fcfs", "prefill_tokens": 100, "prefill_reqs": 1, "decode_reqs": 0,
           "start": 1.0, "duration": 0.02, "seq": 3, "an_unknown_field": 1}
    rec = StepRecord.from_dict(old)
    assert rec.prefill_pairs == 0.0 and rec.schedule_s == 0.0 and rec.entered is None
    assert rec.relqueries == RelQueryCounts() and rec.works and rec.duration == 0.02
