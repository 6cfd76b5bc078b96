"""What every HTTP handler of one server shares: the engine, the name it serves under,
the metrics, and whether the server still admits new requests."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

from tenor.engine.api import Engine, GenerateRequest, HealthState, SamplingParams
from tenor.server.http.errors import ApiError
from tenor.server.metrics import ServerMetrics
from tenor.server.pipeline import RequestPipeline


@dataclass
class ServerContext:
    engine: Engine
    model_name: str
    metrics: ServerMetrics
    created: int = field(default_factory=lambda: int(time.time()))
    draining: bool = False  # set on SIGTERM: in-flight requests finish, new ones get 503
    tokenized: bool = False  # the model reads and writes comma-separated token ids
    accepts_text: bool = False  # ... and also reads text prompts (answered in text)
    pipeline: RequestPipeline = field(init=False)

    def __post_init__(self) -> None:
        self.pipeline = RequestPipeline(self.engine, self.tokenized, self.accepts_text)

    def health(self) -> HealthState:
        return HealthState.STOPPED if self.draining else self.engine.health()

    def admit(self) -> None:
        if self.draining:
            raise ApiError(503, "the server is shutting down; retry on another replica", "shutting_down")

    def check_model(self, model: str | None) -> None:
        """OpenAI's `model` must name what this server serves; omitting it means 'that one'."""
        if model is not None and model != self.model_name:
            raise ApiError(
                404,
                f"The model `{model}` does not exist. This server serves `{self.model_name}`.",
                "model_not_found",
                "model",
            )

    def new_request(self, id_prefix: str, prompt_token_ids: Sequence[int], sampling: SamplingParams) -> GenerateRequest:
        """Checks the engine's limits (a 400 with the numbers) and names the request."""
        return self.pipeline.request(id_prefix, prompt_token_ids, sampling)
