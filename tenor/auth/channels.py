"""One process's cell credential: how it dials other tenor processes and how it listens.

`CellCredentials` is what the entry points parse from flags; `CellAccess` is it made live
(a TokenSource that follows rotations, TLS credentials loaded once).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from tenor.auth.interceptors import BearerToken, TokenCheck, aio_bearer
from tenor.auth.tls import TlsFiles
from tenor.auth.tokens import TokenSet, TokenSource, new_token


@dataclass(frozen=True)
class CellCredentials:
    token: str | None = None  # TENOR_TOKEN: the token text itself (one or more lines)
    token_file: str | None = None  # --token-file
    tls: TlsFiles = field(default_factory=TlsFiles)

    def __post_init__(self) -> None:
        if self.token is not None and not TokenSet.parse(self.token, "TENOR_TOKEN").tokens:
            raise ValueError("TENOR_TOKEN is set but empty")
        if self.token is not None and self.token_file is not None:
            raise ValueError("give the cell token once: --token-file or TENOR_TOKEN, not both")

    @property
    def from_root(self) -> bool:
        return self.token is None and self.token_file is None


def token_source(credentials: CellCredentials, store: object | None) -> TokenSource:
    """Where this process's tokens come from; `store` (a CellStore) when they live in the root."""
    if credentials.token is not None:
        return TokenSource.fixed(TokenSet.parse(credentials.token, "TENOR_TOKEN"), "TENOR_TOKEN")
    if credentials.token_file is not None:
        return TokenSource.from_file(credentials.token_file)
    if store is None:
        return TokenSource.fixed(TokenSet(), "no cell root")

    def read() -> TokenSet:
        text = store.read_token()  # type: ignore[attr-defined]
        return TokenSet() if text is None else TokenSet.parse(text, f"the token in {store.root}")  # type: ignore[attr-defined]

    return TokenSource(read, f"cell root {store.root}")  # type: ignore[attr-defined]


def open_access(credentials: CellCredentials, store: object | None, *, create: bool = False) -> "CellAccess":
    """The live credential of a process; `create`: a server that makes the root's token if none exists
    yet (the first admin or model server of a cell), so every later process finds it there."""
    if create and credentials.from_root and store is not None:
        store.create_token(new_token())  # type: ignore[attr-defined]
    return CellAccess(credentials, token_source(credentials, store).start())


class CellAccess:
    def __init__(self, credentials: CellCredentials, tokens: TokenSource) -> None:
        self.credentials = credentials
        self.tokens = tokens
        tls = credentials.tls
        self._channel_credentials = tls.channel_credentials() if tls.enabled else None
        self._server_credentials = tls.server_credentials() if tls.cert is not None else None

    def channel(self, address: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
        if self._channel_credentials is not None:
            raw = grpc.secure_channel(address, self._channel_credentials, options=options)
        else:
            raw = grpc.insecure_channel(address, options=options)
        return grpc.intercept_channel(raw, BearerToken(self.tokens))

    def aio_channel(self, address: str) -> grpc.aio.Channel:
        if self._channel_credentials is not None:
            return grpc.aio.secure_channel(address, self._channel_credentials, interceptors=aio_bearer(self.tokens))
        return grpc.aio.insecure_channel(address, interceptors=aio_bearer(self.tokens))

    def server(self, open_methods: frozenset[str] = frozenset()) -> grpc.aio.Server:
        # No SO_REUSEPORT: a second server on a taken port must fail, not share it.
        return grpc.aio.server(options=[("grpc.so_reuseport", 0)], interceptors=[TokenCheck(self.tokens, open_methods)])

    def add_port(self, server: grpc.aio.Server, bind: str) -> int:
        """The bound port, 0 when it cannot be bound."""
        try:
            if self._server_credentials is not None:
                return server.add_secure_port(bind, self._server_credentials)
            return server.add_insecure_port(bind)
        except RuntimeError:
            return 0
