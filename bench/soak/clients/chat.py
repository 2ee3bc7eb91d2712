"""OpenAI-style chat requests (``POST /v1/chat/completions``) from many threads, as an OpenAI SDK
sends them: some streamed (server-sent events), some of those dropped by the client before
their answer arrives."""

from __future__ import annotations

import json

import httpx

from soak.clients.base import ClientContext, ClientLoop, describe
from soak.config import STEADY, STEADY_KEY
from soak.ledger import Request

PROMPT = "Reply with one word: is this review happy or sad? {review}"
MAX_TOKENS = 8
STREAM_SHARE = 0.4
#: of the streamed requests, those the client drops after the response's headers
DISCONNECT_SHARE = 0.2
#: what the ledger says of a request the client dropped on purpose
DROPPED = "harness: the client disconnected before the answer (injected)"


def _error_of(r: httpx.Response) -> str:
    try:
        message = r.json()["error"]["message"]
    except Exception:
        message = r.text[:300]
    return f"HTTP {r.status_code}: {message}"


class ChatClient(ClientLoop):
    kind = "chat"

    def __init__(self, ctx: ClientContext, number: int) -> None:
        super().__init__(ctx, number)
        self.http = httpx.Client(base_url=ctx.url, headers={"Authorization": f"Bearer {STEADY_KEY}"},
                                 timeout=httpx.Timeout(ctx.config.request_timeout_s, connect=10.0))

    def teardown(self) -> None:
        self.http.close()

    def once(self) -> bool:
        review = self.ctx.texts.draw(self.rng, 1)[0]
        stream = self.rng.random() < STREAM_SHARE
        drop = stream and self.rng.random() < DISCONNECT_SHARE
        body = {"model": "default", "messages": [{"role": "user", "content": PROMPT.format(review=review)}],
                "max_tokens": MAX_TOKENS, "temperature": 0, "stream": stream}
        req = self.open(STEADY, 1, "disconnect" if drop else None)
        try:
            if stream:
                return self._streamed(req, body, drop)
            r = self.http.post("/v1/chat/completions", json=body)
            if r.status_code != 200:
                req.errored(0, _error_of(r))
                return r.status_code not in (502, 503)
            choices = r.json()["choices"]
            for c in choices:  # exactly one choice is expected: more would be duplicates
                req.answered(0, c["message"]["content"] or "")
            return True
        except httpx.HTTPError as e:
            req.fail_rest(f"the connection to the relserve server failed: {describe(e)}")
            return False
        finally:
            req.end()

    def _streamed(self, req: Request, body: dict, drop: bool) -> bool:
        with self.http.stream("POST", "/v1/chat/completions", json=body) as r:
            if r.status_code != 200:
                r.read()
                req.errored(0, _error_of(r))
                return r.status_code not in (502, 503)
            if drop:
                req.errored(0, DROPPED)
                return True  # leaving the block closes the connection
            text, finished, done = "", False, False
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[len("data: "):]
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    req.errored(0, chunk["error"]["message"])
                    continue
                for c in chunk["choices"]:
                    text += c.get("delta", {}).get("content") or ""
                    finished = finished or c.get("finish_reason") is not None
            if finished:
                req.answered(0, text)
            elif not req.outcomes[0]:
                req.errored(0, "the chat stream ended without a finish_reason" + ("" if done else " or [DONE]"))
            return True
