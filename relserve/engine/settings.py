"""Engine settings (pydantic), readable from ``RELSERVE_*`` environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from relserve.policy import CostModel, PolicySettings


class EngineSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RELSERVE_", env_nested_delimiter="__", protected_namespaces=())

    #: "smollm2" (default), a local Hugging Face folder, or a cached model id
    model: str = "smollm2"
    #: one of ``relserve.policy.policies.PolicyName``
    policy: str = "relserve"
    max_model_len: int = Field(default=2048, ge=64)
    max_num_seqs: int = Field(default=256, ge=1)
    #: token budget of one step; prefill time on these 2-core CPUs grows faster than linearly
    #: above about 1-2k tokens a step (see `relserve calibrate`), so the default stays below
    max_num_batched_tokens: int = Field(default=1024, ge=64)
    #: memory for the KV cache (on CPU this is host memory)
    kv_cache_gb: float = Field(default=2.0, gt=0)
    #: KV block size in tokens; vLLM's CPU attention needs a multiple of 32
    block_size: int = Field(default=32, ge=16)
    #: "auto": bfloat16 where the CPU computes it natively, else float32 (``resolved_dtype``);
    #: or any dtype vLLM takes
    dtype: str = "auto"
    enable_prefix_caching: bool = True
    #: share of host memory vLLM-CPU may reserve (its gpu_memory_utilization)
    memory_utilization: float = Field(default=0.4, gt=0, le=1)
    seed: int = 0
    #: skip torch.compile: None picks eager on CPU (a much shorter start for slightly slower
    #: steps, docs/benchmarks.md#the-engine-at-the-machines-limit) and compiled on GPU
    enforce_eager: bool | None = None
    #: None: the calibration stored for this model and machine, else the defaults
    cost_model: CostModel | None = None
    policy_settings: PolicySettings = Field(default_factory=PolicySettings)
    #: CPU cores the model's threads use: "all", or vLLM's own choice ("auto", which keeps one
    #: core for its engine process: on 2 cores that halves the compute)
    cpu_threads: str = "all"
    #: memory allocator of vLLM-CPU's processes: "tcmalloc" (preloaded) or "system" (glibc)
    cpu_allocator: str = "system"
    #: OpenMP runtime of the model's threads: "gnu" (torch's own), "intel" or "llvm" (preloaded)
    cpu_openmp: str = "gnu"
    #: keep vLLM's INFO logging out of the user's terminal
    quiet: bool = True

    @property
    def resolved_dtype(self) -> str:
        """The dtype the engine runs in: ``dtype``, with "auto" resolved for this CPU."""
        from relserve.cpu_features import default_dtype

        return default_dtype() if self.dtype == "auto" else self.dtype
