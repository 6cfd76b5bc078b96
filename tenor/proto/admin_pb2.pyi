from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Model(_message.Message):
    __slots__ = ("model_name", "config_name", "checkpoint", "requested_replicas", "overrides", "uuid")
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
    REQUESTED_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    OVERRIDES_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    config_name: str
    checkpoint: str
    requested_replicas: int
    overrides: _containers.ScalarMap[str, str]
    uuid: str
    def __init__(self, model_name: _Optional[str] = ..., config_name: _Optional[str] = ..., checkpoint: _Optional[str] = ..., requested_replicas: _Optional[int] = ..., overrides: _Optional[_Mapping[str, str]] = ..., uuid: _Optional[str] = ...) -> None: ...

class PublishRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: Model
    def __init__(self, model: _Optional[_Union[Model, _Mapping]] = ...) -> None: ...

class PublishResponse(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: Model
    def __init__(self, model: _Optional[_Union[Model, _Mapping]] = ...) -> None: ...

class UpdateRequest(_message.Message):
    __slots__ = ("model_name", "replicas", "checkpoint", "overrides")
    class OverridesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    OVERRIDES_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    replicas: int
    checkpoint: str
    overrides: _containers.ScalarMap[str, str]
    def __init__(self, model_name: _Optional[str] = ..., replicas: _Optional[int] = ..., checkpoint: _Optional[str] = ..., overrides: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UpdateResponse(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: Model
    def __init__(self, model: _Optional[_Union[Model, _Mapping]] = ...) -> None: ...

class UnpublishRequest(_message.Message):
    __slots__ = ("model_name",)
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    def __init__(self, model_name: _Optional[str] = ...) -> None: ...

class UnpublishResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class Replica(_message.Message):
    __slots__ = ("address", "status", "failure_reason")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    address: str
    status: _common_pb2.ModelStatus
    failure_reason: str
    def __init__(self, address: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.ModelStatus, str]] = ..., failure_reason: _Optional[str] = ...) -> None: ...

class PublishedModel(_message.Message):
    __slots__ = ("model", "addresses", "replicas", "failure_reason", "gave_up", "shortfall")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    GAVE_UP_FIELD_NUMBER: _ClassVar[int]
    SHORTFALL_FIELD_NUMBER: _ClassVar[int]
    model: Model
    addresses: _containers.RepeatedScalarFieldContainer[str]
    replicas: _containers.RepeatedCompositeFieldContainer[Replica]
    failure_reason: str
    gave_up: bool
    shortfall: str
    def __init__(self, model: _Optional[_Union[Model, _Mapping]] = ..., addresses: _Optional[_Iterable[str]] = ..., replicas: _Optional[_Iterable[_Union[Replica, _Mapping]]] = ..., failure_reason: _Optional[str] = ..., gave_up: _Optional[bool] = ..., shortfall: _Optional[str] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[PublishedModel]
    def __init__(self, models: _Optional[_Iterable[_Union[PublishedModel, _Mapping]]] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelOnServer(_message.Message):
    __slots__ = ("model_name", "status", "failure_reason", "queue_depth", "running", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    LATENCY_P50_MS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_P95_MS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_P99_MS_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    status: _common_pb2.ModelStatus
    failure_reason: str
    queue_depth: int
    running: int
    latency_p50_ms: float
    latency_p95_ms: float
    latency_p99_ms: float
    def __init__(self, model_name: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.ModelStatus, str]] = ..., failure_reason: _Optional[str] = ..., queue_depth: _Optional[int] = ..., running: _Optional[int] = ..., latency_p50_ms: _Optional[float] = ..., latency_p95_ms: _Optional[float] = ..., latency_p99_ms: _Optional[float] = ...) -> None: ...

class ServerInfo(_message.Message):
    __slots__ = ("address", "http_address", "spec", "healthy", "last_seen_age_s", "memory_used_bytes", "queue_depth", "models")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HTTP_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_AGE_S_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    address: str
    http_address: str
    spec: _common_pb2.ServerSpec
    healthy: bool
    last_seen_age_s: float
    memory_used_bytes: int
    queue_depth: int
    models: _containers.RepeatedCompositeFieldContainer[ModelOnServer]
    def __init__(self, address: _Optional[str] = ..., http_address: _Optional[str] = ..., spec: _Optional[_Union[_common_pb2.ServerSpec, _Mapping]] = ..., healthy: _Optional[bool] = ..., last_seen_age_s: _Optional[float] = ..., memory_used_bytes: _Optional[int] = ..., queue_depth: _Optional[int] = ..., models: _Optional[_Iterable[_Union[ModelOnServer, _Mapping]]] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("admin_id", "cell", "servers")
    ADMIN_ID_FIELD_NUMBER: _ClassVar[int]
    CELL_FIELD_NUMBER: _ClassVar[int]
    SERVERS_FIELD_NUMBER: _ClassVar[int]
    admin_id: str
    cell: str
    servers: _containers.RepeatedCompositeFieldContainer[ServerInfo]
    def __init__(self, admin_id: _Optional[str] = ..., cell: _Optional[str] = ..., servers: _Optional[_Iterable[_Union[ServerInfo, _Mapping]]] = ...) -> None: ...

class WatchLocRequest(_message.Message):
    __slots__ = ("model_name",)
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    def __init__(self, model_name: _Optional[str] = ...) -> None: ...

class WatchLocResponse(_message.Message):
    __slots__ = ("admin_id", "seqno", "reset", "addresses", "added", "removed")
    ADMIN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQNO_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    ADDED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    admin_id: str
    seqno: int
    reset: bool
    addresses: _containers.RepeatedScalarFieldContainer[str]
    added: _containers.RepeatedScalarFieldContainer[str]
    removed: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, admin_id: _Optional[str] = ..., seqno: _Optional[int] = ..., reset: _Optional[bool] = ..., addresses: _Optional[_Iterable[str]] = ..., added: _Optional[_Iterable[str]] = ..., removed: _Optional[_Iterable[str]] = ...) -> None: ...

class WaitForReadyRequest(_message.Message):
    __slots__ = ("model_name", "num_replicas")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    num_replicas: int
    def __init__(self, model_name: _Optional[str] = ..., num_replicas: _Optional[int] = ...) -> None: ...

class WaitForReadyResponse(_message.Message):
    __slots__ = ("addresses",)
    ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    addresses: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, addresses: _Optional[_Iterable[str]] = ...) -> None: ...

class JoinRequest(_message.Message):
    __slots__ = ("address", "http_address", "spec")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HTTP_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    address: str
    http_address: str
    spec: _common_pb2.ServerSpec
    def __init__(self, address: _Optional[str] = ..., http_address: _Optional[str] = ..., spec: _Optional[_Union[_common_pb2.ServerSpec, _Mapping]] = ...) -> None: ...

class JoinResponse(_message.Message):
    __slots__ = ("admin_id",)
    ADMIN_ID_FIELD_NUMBER: _ClassVar[int]
    admin_id: str
    def __init__(self, admin_id: _Optional[str] = ...) -> None: ...
