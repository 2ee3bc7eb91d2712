"""On a CUDA GPU: the engine with the plug-in over vLLM's AsyncScheduler, two concurrent
relQueries and a cancel. Skipped, with the reason, on machines without a GPU (``pytest -m gpu -rs``).

The model is ``$RELSERVE_GPU_MODEL`` (a local folder or an id in the local Hugging Face cache),
else the default SmolLM2-135M.
"""

from __future__ import annotations

import os

import pytest
from waits import result_within, run_within, wait_until

pytestmark = pytest.mark.gpu


def _no_gpu_reason() -> str | None:
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU here (torch.cuda.is_available() is False)"
    from vllm.platforms import current_platform

    if not current_platform.is_cuda():
        return f"the installed vLLM is not the CUDA build (platform {current_platform.device_name!r})"
    return None


@pytest.fixture(scope="module")
def gpu_engine():
    reason = _no_gpu_reason()
    if reason:
        pytest.skip(reason)
    from relserve import Engine

    eng = Engine(model=os.environ.get("RELSERVE_GPU_MODEL"), policy="relserve", max_num_seqs=64)
    yield eng
    eng.close()


def test_two_relqueries_and_a_cancel_on_a_gpu(gpu_engine):
    from relserve import RelQuery

    stats = gpu_engine.scheduler_stats()
    # vLLM turns async scheduling on for CUDA; the plug-in must keep it.
    assert stats["scheduler"] == "RelServeAsyncScheduler", stats["scheduler"]
    long_rq = RelQuery("Write a very long essay about {topic}.", [{"topic": f"topic {i}"} for i in range(48)], max_tokens=400)
    short = RelQuery("Is {name} a person's name? Answer yes or no.", [{"name": f"name {i}"} for i in range(32)], max_tokens=5)
    h_long = gpu_engine.submit(long_rq)
    h_short = gpu_engine.submit(short)
    # cancel the long one mid-run: once the scheduler has decoded a step of its rows
    wait_until(lambda: any(s.decoded.get(h_long.rel_id) for s in gpu_engine.scheduler_steps(stats["last_step"])),
               "the engine decoding the long relQuery's rows", timeout=120)
    h_long.cancel()
    res_long = result_within(h_long, 120, "the cancelled long relQuery to end")
    res_short = result_within(h_short, 120, "the short relQuery to finish")
    assert res_long.cancelled
    assert all(r.error is None and r.text for r in res_short.rows)
    assert gpu_engine.wait_idle(60), "the GPU engine still busy 60 s after the cancel"
    # no request state left behind in the workers: the engine keeps serving full batches
    again = run_within(gpu_engine, RelQuery("Say hello to {name}.", [{"name": f"n{i}"} for i in range(64)], max_tokens=8))
    assert all(r.error is None and r.text for r in again.rows)
