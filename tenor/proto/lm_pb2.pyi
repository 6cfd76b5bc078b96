from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExtraInputs(_message.Message):
    __slots__ = ("items", "strings")
    class ItemsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class StringsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.ScalarMap[str, float]
    strings: _containers.ScalarMap[str, str]
    def __init__(self, items: _Optional[_Mapping[str, float]] = ..., strings: _Optional[_Mapping[str, str]] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("model_key", "text", "extra_inputs")
    MODEL_KEY_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    EXTRA_INPUTS_FIELD_NUMBER: _ClassVar[int]
    model_key: str
    text: str
    extra_inputs: ExtraInputs
    def __init__(self, model_key: _Optional[str] = ..., text: _Optional[str] = ..., extra_inputs: _Optional[_Union[ExtraInputs, _Mapping]] = ...) -> None: ...

class DecodedText(_message.Message):
    __slots__ = ("text", "score")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    text: str
    score: float
    def __init__(self, text: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("texts",)
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    texts: _containers.RepeatedCompositeFieldContainer[DecodedText]
    def __init__(self, texts: _Optional[_Iterable[_Union[DecodedText, _Mapping]]] = ...) -> None: ...

class GenerateStreamItem(_message.Message):
    __slots__ = ("text", "prefix_len", "scores")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PREFIX_LEN_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    text: str
    prefix_len: int
    scores: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, text: _Optional[str] = ..., prefix_len: _Optional[int] = ..., scores: _Optional[_Iterable[float]] = ...) -> None: ...

class GenerateStreamResponse(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[GenerateStreamItem]
    def __init__(self, items: _Optional[_Iterable[_Union[GenerateStreamItem, _Mapping]]] = ...) -> None: ...

class ScoreRequest(_message.Message):
    __slots__ = ("model_key", "prefix", "suffix", "extra_inputs")
    MODEL_KEY_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    SUFFIX_FIELD_NUMBER: _ClassVar[int]
    EXTRA_INPUTS_FIELD_NUMBER: _ClassVar[int]
    model_key: str
    prefix: str
    suffix: _containers.RepeatedScalarFieldContainer[str]
    extra_inputs: ExtraInputs
    def __init__(self, model_key: _Optional[str] = ..., prefix: _Optional[str] = ..., suffix: _Optional[_Iterable[str]] = ..., extra_inputs: _Optional[_Union[ExtraInputs, _Mapping]] = ...) -> None: ...

class ScoreResponse(_message.Message):
    __slots__ = ("logp",)
    LOGP_FIELD_NUMBER: _ClassVar[int]
    logp: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, logp: _Optional[_Iterable[float]] = ...) -> None: ...
