"""Token counters read from a server's Prometheus ``/metrics`` (vLLM's and relserve's)."""

from __future__ import annotations

from collections.abc import Callable

TokenReader = Callable[[], tuple[float, float]]


def prom(url: str, key: str | None = None) -> dict[str, float]:
    """Prometheus counters summed over their labels (plus relserve_tokens by kind)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    for fam in text_string_to_metric_families(httpx.get(url, timeout=30, headers=headers).text):
        for s in fam.samples:
            name = s.name
            if name == "relserve_tokens_total":
                name = f"relserve_tokens_total:{s.labels.get('kind')}"
            out[name] = out.get(name, 0.0) + s.value
    return out


def prom_tokens(url: str, prompt: str, cached: str, key: str | None = None) -> TokenReader:
    """A reader of a server's prompt-token and prefix-cached-token counters (``key``: a key that
    may read relserve's /metrics)."""
    def read() -> tuple[float, float]:
        got = prom(url + "/metrics", key)
        return got.get(prompt, 0.0), got.get(cached, 0.0)
    return read
