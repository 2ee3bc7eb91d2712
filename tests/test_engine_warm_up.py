"""The engine warms its label-scoring path at start (fast layer: vLLM's generate is replaced by a
recorder; the real engine's figures are in docs/benchmarks.md, "The floor: every statement alone")."""

from __future__ import annotations

import asyncio

from relserve.engine.engine import warm_scoring


class _Tokenizer:
    def __call__(self, text, add_special_tokens=False):
        assert text == "Answer:" and not add_special_tokens
        return {"input_ids": [19842, 42]}


class _RecordingLLM:
    def __init__(self):
        self.requests = []

    async def generate(self, prompt, params, request_id):
        self.requests.append((prompt, params, request_id))
        yield object()


def test_start_sends_one_label_scoring_request_that_leaves_no_prefix_block():
    llm = _RecordingLLM()  # no vLLM process: only the warm-up's request is looked at
    asyncio.run(warm_scoring(llm, _Tokenizer()))
    [(prompt, params, request_id)] = llm.requests
    assert prompt == {"prompt_token_ids": [19842, 42]}
    # the scoring path: chosen log-probabilities of one token, one token long
    assert params.max_tokens == 1 and params.temperature == 0.0 and params.logprob_token_ids == [19842]
    assert request_id.startswith("warm-scoring-") and params.extra_args is None
