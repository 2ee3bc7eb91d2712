"""The server's JSON replies that its clients read back (pydantic): a job's description and the
list of a tenant's jobs, ``/health``, ``/v1/relqueries/plan`` and ``/v1/relqueries/tokens``, a
formula cell's answer, and the first event of a job's stream. The server builds them and sends their JSON; the client
(``relserve.client``) and DuckDB's server mode validate what they receive into them, so the wire
format is written down once. Kept outside ``relserve.server``, as ``JobStats`` is, so a client
does not import the server.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from relserve.job_stats import JobStats


class JobProgress(BaseModel):
    #: rows finished, of all the job's rows
    done: int
    total: int


class JobDescription(BaseModel):
    """A job (relQuery, cells, OpenAI call) as its status reply describes it; also the body of its
    submission's 201, its stream's ``done`` event, ``/result`` (with ``rows``) and its cancel."""

    id: str
    #: relquery, cells, completion (OpenAI), chat (OpenAI)
    kind: str
    #: running, finished, cancelled, failed
    status: str
    error: str | None
    #: when the job was created (Unix seconds)
    created: float
    progress: JobProgress
    priority: int
    deadline_s: float | None
    stats: JobStats

    def to_json(self) -> dict[str, object]:
        """The description as the server sends it: the stats only with the figures that were set."""
        return {**self.model_dump(exclude={"stats"}), "stats": self.stats.to_json()}


class UndescribedJob(BaseModel):
    """A job in the tenant's list whose description could not be built: one such job must not hide
    the tenant's others."""

    id: str
    kind: str
    status: str
    #: why it could not be described
    error: str

    def to_json(self) -> dict[str, object]:
        return self.model_dump()


class JobList(BaseModel):
    """The caller's jobs (``GET /v1/relqueries``): running, and finished in the last minutes."""

    # a full description is tried first: an undescribed job lacks most of its fields
    relqueries: list[Annotated[JobDescription | UndescribedJob, Field(union_mode="left_to_right")]]

    def to_json(self) -> dict[str, object]:
        return {"relqueries": [j.to_json() for j in self.relqueries]}


class StreamStart(BaseModel):
    """The first event of a job's stream: ``accepted`` (a relQuery: ``rows``; a submission's also
    ``cached_rows``) or ``batch`` (cells: ``cells``, ``cached``). Only the fields given are sent."""

    event: str = "accepted"
    id: str
    rows: int | None = None
    cells: int | None = None
    #: rows answered from the result cache (a relQuery's submission)
    cached_rows: int | None = None
    #: cells answered from the result cache
    cached: int | None = None
    #: distinct prompts the engine runs
    engine_rows: int = 0

    @property
    def total(self) -> int:
        """Rows (or cells) the stream will carry."""
        return self.rows if self.rows is not None else (self.cells or 0)

    def to_json(self) -> dict[str, object]:
        """The event's fields as sent, ``event`` apart (NDJSON puts it first, SSE in its own line)."""
        return self.model_dump(exclude_unset=True, exclude={"event"})


class CellAnswer(BaseModel):
    """One formula cell's answer (``/v1/cells``): in its reply's ``cells``, or a ``cell`` event of
    its stream."""

    id: str
    #: the answer in the call's type (JSON); None when the cell failed
    value: object = None
    text: str | None = None
    error: str | None = None
    #: answered from the result cache
    cached: bool = False


class Health(BaseModel):
    """``/health`` of a server that answers (200)."""

    status: Literal["ok"] = "ok"
    model: str
    policy: str
    #: "open" without tenants, else every request but /health needs a tenant's key
    auth: Literal["open", "api-key"]
    #: whether the server keeps a result cache
    result_cache: bool
    relqueries_in_flight: int
    rows_in_flight: int


class HealthProblem(BaseModel):
    """``/health`` of a server that can no longer answer (503), so that a load balancer or a
    supervisor acts on it."""

    status: Literal["stopping", "engine-dead"]
    error: str
    model: str


class CascadeOutlook(BaseModel):
    """Whether a model cascade would answer some of a planned relQuery's rows (relserve/cascade/)."""

    #: the agreement target (None: a recall / precision cascade)
    target: float | None = None
    #: a filter's recall and precision targets (None: not asked)
    recall: float | None = None
    precision: float | None = None
    applies: bool
    #: what it would do, or why it would not run (EXPLAIN's line)
    plan: str


class RelQueryPlan(BaseModel):
    """What a relQuery would send to the engine, without running it (``/v1/relqueries/plan``)."""

    rows: int
    #: distinct prompts the engine would run
    engine_rows: int
    #: rows answered from the result cache
    cached_rows: int
    #: rows that cannot run (a NULL placeholder value)
    failed_rows: int
    #: issue 47: ``CallEstimate.to_dict()``; None when it cannot be made (no tokenizer for the model)
    estimate: dict[str, object] | None = None
    #: only for a call with the ``cascade`` option
    cascade: CascadeOutlook | None = None

    def to_json(self) -> dict[str, object]:
        """The plan as the server sends it: ``cascade`` only for a call that asked for one."""
        return self.model_dump(exclude={"cascade"} if self.cascade is None else None)


class PromptTokenCounts(BaseModel):
    """Each row's prompt tokens as the server's engine would see them (``/v1/relqueries/tokens``),
    in row order."""

    #: None for a row that cannot run
    prompt_tokens: list[int | None]
    #: why a row cannot run (None for the others)
    errors: list[str | None]
    model: str

    def per_row(self) -> list[int | str | None]:
        """Each row's count, or the reason it has none (as ``count_row_tokens`` gives them)."""
        return [n if n is not None else err for n, err in zip(self.prompt_tokens, self.errors)]
