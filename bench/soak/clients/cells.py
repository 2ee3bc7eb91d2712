"""Spreadsheet cells as the sheet page (``/sheet``) sends a recalculation: one ``POST /v1/cells``
with every dirty ``=LLM(...)`` cell of a column filled down, streamed back as NDJSON, one
``cell`` event per cell. Now and then one cell's formula is wrong (an argument too many): that
cell must fail alone, naming the problem, and the others compute."""

from __future__ import annotations

import json

import httpx

from soak.clients.base import ClientContext, ClientLoop, describe
from soak.config import STEADY, STEADY_KEY

TEMPLATE = "Is this review positive? {A} Answer yes or no."
MAX_TOKENS = 4
BAD_FORMULA_SHARE = 0.1


class CellsClient(ClientLoop):
    kind = "cells"

    def __init__(self, ctx: ClientContext, number: int) -> None:
        super().__init__(ctx, number)
        self.http = httpx.Client(base_url=ctx.url, headers={"Authorization": f"Bearer {STEADY_KEY}"},
                                 timeout=httpx.Timeout(ctx.config.request_timeout_s, connect=10.0))

    def teardown(self) -> None:
        self.http.close()

    def once(self) -> bool:
        reviews = self.ctx.texts.draw(self.rng, self.rng.randint(3, 6))
        # B2:B<n> filled down from A2:A<n>, as the page sends them
        cells = [{"id": f"B{k + 2}", "template": TEMPLATE, "args": [text]} for k, text in enumerate(reviews)]
        if self.rng.random() < BAD_FORMULA_SHARE:
            cells[-1]["args"].append("an argument the template has no placeholder for")
        index = {c["id"]: k for k, c in enumerate(cells)}
        req = self.open(STEADY, len(cells))
        body = {"cells": cells, "max_tokens": MAX_TOKENS, "stream": True}
        headers = {"Accept": "application/x-ndjson"}
        try:
            with self.http.stream("POST", "/v1/cells", json=body, headers=headers) as r:
                if r.status_code != 200:
                    r.read()
                    req.fail_rest(f"HTTP {r.status_code}: {r.text[:300]}")
                    return r.status_code not in (502, 503)
                done = False
                for line in r.iter_lines():
                    if not line.strip():
                        continue
                    ev = json.loads(line)
                    if ev["event"] == "batch":
                        req.job_id = ev["id"]
                    elif ev["event"] == "cell":
                        k = index[ev["id"]]
                        if ev["error"]:
                            req.errored(k, ev["error"])
                        else:
                            req.answered(k, "" if ev["value"] is None else str(ev["value"]))
                    elif ev["event"] == "done":
                        done = True
                if not done:  # as the page: a stream cut short leaves no cell spinning
                    req.fail_rest("no answer (the stream ended early)")
            return True
        except httpx.HTTPError as e:
            req.fail_rest(f"the connection to the relserve server failed: {describe(e)}")
            return False
        finally:
            req.end()
