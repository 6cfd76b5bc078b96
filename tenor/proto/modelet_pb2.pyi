from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LoadRequest(_message.Message):
    __slots__ = ("model_name", "config_name", "checkpoint", "overrides")
    class OverridesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_NAME_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    OVERRIDES_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    config_name: str
    checkpoint: str
    overrides: _containers.ScalarMap[str, str]
    def __init__(self, model_name: _Optional[str] = ..., config_name: _Optional[str] = ..., checkpoint: _Optional[str] = ..., overrides: _Optional[_Mapping[str, str]] = ...) -> None: ...

class LoadResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UnloadRequest(_message.Message):
    __slots__ = ("model_name",)
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    def __init__(self, model_name: _Optional[str] = ...) -> None: ...

class UnloadResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UpdateLoadedRequest(_message.Message):
    __slots__ = ("model_name", "checkpoint", "overrides")
    class OverridesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    OVERRIDES_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    checkpoint: str
    overrides: _containers.ScalarMap[str, str]
    def __init__(self, model_name: _Optional[str] = ..., checkpoint: _Optional[str] = ..., overrides: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UpdateLoadedResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelState(_message.Message):
    __slots__ = ("model_name", "config_name", "checkpoint", "status", "failure_reason", "queue_depth", "running", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms", "loaded_at", "requests_ok", "requests_failed")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_NAME_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    LATENCY_P50_MS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_P95_MS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_P99_MS_FIELD_NUMBER: _ClassVar[int]
    LOADED_AT_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_OK_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FAILED_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    config_name: str
    checkpoint: str
    status: _common_pb2.ModelStatus
    failure_reason: str
    queue_depth: int
    running: int
    latency_p50_ms: float
    latency_p95_ms: float
    latency_p99_ms: float
    loaded_at: float
    requests_ok: int
    requests_failed: int
    def __init__(self, model_name: _Optional[str] = ..., config_name: _Optional[str] = ..., checkpoint: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.ModelStatus, str]] = ..., failure_reason: _Optional[str] = ..., queue_depth: _Optional[int] = ..., running: _Optional[int] = ..., latency_p50_ms: _Optional[float] = ..., latency_p95_ms: _Optional[float] = ..., latency_p99_ms: _Optional[float] = ..., loaded_at: _Optional[float] = ..., requests_ok: _Optional[int] = ..., requests_failed: _Optional[int] = ...) -> None: ...

class ServerStats(_message.Message):
    __slots__ = ("uptime_s", "queue_depth", "running", "memory_used_bytes")
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    uptime_s: float
    queue_depth: int
    running: int
    memory_used_bytes: int
    def __init__(self, uptime_s: _Optional[float] = ..., queue_depth: _Optional[int] = ..., running: _Optional[int] = ..., memory_used_bytes: _Optional[int] = ...) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("models", "server")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelState]
    server: ServerStats
    def __init__(self, models: _Optional[_Iterable[_Union[ModelState, _Mapping]]] = ..., server: _Optional[_Union[ServerStats, _Mapping]] = ...) -> None: ...
