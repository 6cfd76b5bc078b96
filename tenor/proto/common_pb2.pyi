from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class ModelStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NONE: _ClassVar[ModelStatus]
    LOADING: _ClassVar[ModelStatus]
    LOADED: _ClassVar[ModelStatus]
    FAILED: _ClassVar[ModelStatus]
    UNLOADING: _ClassVar[ModelStatus]
NONE: ModelStatus
LOADING: ModelStatus
LOADED: ModelStatus
FAILED: ModelStatus
UNLOADING: ModelStatus

class ServerSpec(_message.Message):
    __slots__ = ("platform", "memory_bytes", "tags", "servable_configs", "group_size")
    PLATFORM_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    SERVABLE_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    GROUP_SIZE_FIELD_NUMBER: _ClassVar[int]
    platform: str
    memory_bytes: int
    tags: _containers.RepeatedScalarFieldContainer[str]
    servable_configs: _containers.RepeatedScalarFieldContainer[str]
    group_size: int
    def __init__(self, platform: _Optional[str] = ..., memory_bytes: _Optional[int] = ..., tags: _Optional[_Iterable[str]] = ..., servable_configs: _Optional[_Iterable[str]] = ..., group_size: _Optional[int] = ...) -> None: ...
