from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PrefillRequest(_message.Message):
    __slots__ = ("model_key", "prompt_token_ids", "skip_blocks")
    MODEL_KEY_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SKIP_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    model_key: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    skip_blocks: int
    def __init__(self, model_key: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., skip_blocks: _Optional[int] = ...) -> None: ...

class KVHeader(_message.Message):
    __slots__ = ("block_size", "first_block", "num_blocks", "kv_shape", "kv_dtype", "scales_shape", "scales_dtype", "total_bytes", "checksum")
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    FIRST_BLOCK_FIELD_NUMBER: _ClassVar[int]
    NUM_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    KV_SHAPE_FIELD_NUMBER: _ClassVar[int]
    KV_DTYPE_FIELD_NUMBER: _ClassVar[int]
    SCALES_SHAPE_FIELD_NUMBER: _ClassVar[int]
    SCALES_DTYPE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    block_size: int
    first_block: int
    num_blocks: int
    kv_shape: _containers.RepeatedScalarFieldContainer[int]
    kv_dtype: str
    scales_shape: _containers.RepeatedScalarFieldContainer[int]
    scales_dtype: str
    total_bytes: int
    checksum: bytes
    def __init__(self, block_size: _Optional[int] = ..., first_block: _Optional[int] = ..., num_blocks: _Optional[int] = ..., kv_shape: _Optional[_Iterable[int]] = ..., kv_dtype: _Optional[str] = ..., scales_shape: _Optional[_Iterable[int]] = ..., scales_dtype: _Optional[str] = ..., total_bytes: _Optional[int] = ..., checksum: _Optional[bytes] = ...) -> None: ...

class KVChunk(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: KVHeader
    data: bytes
    def __init__(self, header: _Optional[_Union[KVHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...
