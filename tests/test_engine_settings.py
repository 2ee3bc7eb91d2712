"""Engine settings this machine cannot run fail when the Engine is made, naming the rule, before
any vLLM process starts (vLLM itself fails in its worker process, behind a stack of its own)."""

from __future__ import annotations

import pytest

import relserve.engine.engine as engine_module
from relserve import Engine
from relserve.errors import ConfigError


@pytest.mark.parametrize("block_size", [16, 48])
def test_a_kv_block_size_the_cpu_attention_cannot_take_is_refused_naming_the_rule(monkeypatch, block_size):
    monkeypatch.setattr(engine_module, "_on_cpu", lambda: True)
    started = []

    async def start(self):  # in place of vLLM's start: what would have started
        started.append(self)

    monkeypatch.setattr(Engine, "_start", start)
    with pytest.raises(ConfigError, match=rf"^block_size {block_size}: vLLM's CPU attention takes KV blocks of a multiple "
                                          r"of 32 tokens \(32, 64, \.\.\.\); 16 works on a GPU only$"):
        Engine(block_size=block_size)
    assert started == []
