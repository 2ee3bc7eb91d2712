"""Builds relserve's scheduler plug-in from a real vLLM config, without a model runner.

vLLM's own scheduler tests do the same (tests/v1/core/utils.py ``create_scheduler``): a
``VllmConfig`` from the model's config.json and a hand-made ``KVCacheConfig``. The plug-in then
runs vLLM's real ``Scheduler`` code (queues, KV cache manager, preemption); only the model's
output is made up, by ``finish_step``.
"""

from __future__ import annotations

import itertools

import torch
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from relserve.model import resolve_model

_ids = itertools.count()


def build_scheduler(
    cls,
    *,
    num_blocks: int = 64,
    block_size: int = 16,
    max_num_seqs: int = 16,
    max_num_batched_tokens: int = 1024,
    watermark: float = 0.0,
    async_scheduling: bool = False,
):
    model_config = ModelConfig(model=resolve_model(None).path, dtype="float32", seed=0, max_model_len=1024)
    scheduler_config = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=1024,
        enable_chunked_prefill=True,
        is_encoder_decoder=False,
        watermark=watermark,
        async_scheduling=async_scheduling,
    )
    cache_config = CacheConfig(block_size=block_size, cache_dtype="auto", enable_prefix_caching=True)
    cache_config.num_gpu_blocks = num_blocks
    vllm_config = VllmConfig(scheduler_config=scheduler_config, model_config=model_config, cache_config=cache_config)
    # vLLM-CPU resolves async scheduling to off; a CUDA platform resolves it to on. Set it after
    # the config's checks, as VllmConfig leaves it on a GPU.
    vllm_config.scheduler_config.async_scheduling = async_scheduling
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32))],
    )
    return cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        log_stats=False,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=block_size,
    )


def make_request(prompt_tokens: int, max_tokens: int, rel_id: str, rel_size: int = 1, arrival: float = 0.0, block_size: int = 16) -> Request:
    init_none_hash(sha256)
    n = next(_ids)
    sp = SamplingParams(
        max_tokens=max_tokens,
        ignore_eos=True,
        extra_args={"relserve": {"rel_id": rel_id, "rel_size": rel_size, "arrival": arrival}},
    )
    return Request(
        request_id=f"{rel_id}-{n}",
        # distinct prompts: no prefix-cache hits between requests
        prompt_token_ids=[1000 + n] * prompt_tokens,
        sampling_params=sp,
        pooling_params=None,
        block_hasher=get_request_block_hasher(block_size, sha256),
    )


def finish_step(scheduler, out, token: int = 7) -> None:
    """Feed back one sampled token for every request the step computed to its end."""
    req_ids, sampled = [], []
    for req_id in out.num_scheduled_tokens:
        req = scheduler.requests[req_id]
        req_ids.append(req_id)
        sampled.append([token] if req.num_computed_tokens >= req.num_tokens else [])
    mro = ModelRunnerOutput(
        req_ids=req_ids,
        req_id_to_index={r: i for i, r in enumerate(req_ids)},
        sampled_token_ids=sampled,
        logprobs=None,
        prompt_logprobs_dict={},
        pooler_output=[],
    )
    scheduler.update_from_output(out, mro)
