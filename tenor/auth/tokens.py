"""Cell tokens: what a process sends and what it accepts.

A token text holds one or more tokens, one per line: the first is the one sent, every one
is accepted. That makes rotation a three-step edit nobody notices (see `rotation_steps`):
accept the new token everywhere, then send it everywhere, then stop accepting the old one.

Where the text comes from, in order: an explicit token (`TENOR_TOKEN`), a token file
(`--token-file`), or the cell root (`<root>/tenor/<cell>/token`, 0600; an etcd key), which
the first admin or model server of a cell creates. Sources are re-read every `reload_s`, so
a rotation in the root or in a mounted secret reaches running processes without a restart.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

TOKEN_ENV = "TENOR_TOKEN"
RELOAD_S = 1.0
_MIN_TOKEN_CHARS = 16


def new_token() -> str:
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class TokenSet:
    tokens: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for token in self.tokens:
            if len(token) < _MIN_TOKEN_CHARS or any(c.isspace() for c in token) or not token.isprintable():
                raise ValueError(
                    f"a cell token must be at least {_MIN_TOKEN_CHARS} printable characters without spaces"
                )

    @classmethod
    def parse(cls, text: str, where: str) -> "TokenSet":
        try:
            return cls(tuple(line.strip() for line in text.splitlines() if line.strip()))
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None

    def to_text(self) -> str:
        return "".join(f"{t}\n" for t in self.tokens)

    @property
    def sending(self) -> str | None:
        return self.tokens[0] if self.tokens else None

    def accepts(self, offered: str) -> bool:
        """Constant time in the offered token: every accepted token is compared, no early exit."""
        matched = False
        for token in self.tokens:
            matched |= hmac.compare_digest(offered.encode(), token.encode())
        return matched and bool(offered)


def rotation_steps(current: TokenSet, new: str) -> list[TokenSet]:
    """The token texts to write in turn, each one after every process re-read the last one."""
    old = current.sending
    if old is None:
        return [TokenSet((new,))]
    return [TokenSet((old, new)), TokenSet((new, old)), TokenSet((new,))]


class TokenSource:
    """The current TokenSet of one process, re-read from `read` every `reload_s` on a daemon thread.

    A failed read keeps the last good set (a flaky root must not lock everyone out)."""

    def __init__(self, read: Callable[[], TokenSet], description: str, reload_s: float = RELOAD_S) -> None:
        self.description = description
        self._read = read
        self._reload_s = reload_s
        self._lock = threading.Lock()
        self._tokens = TokenSet()
        self.last_error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if not self.reload():  # at start, an unreadable token is the user's error, said once
            raise ValueError(f"cannot read the cell token from {description}: {self.last_error}")

    @classmethod
    def fixed(cls, tokens: TokenSet, description: str) -> "TokenSource":
        return cls(lambda: tokens, description)

    @classmethod
    def from_file(cls, path: str) -> "TokenSource":
        def read() -> TokenSet:
            return TokenSet.parse(Path(path).read_text(), path)

        return cls(read, f"token file {path}")

    def reload(self) -> bool:
        try:
            tokens = self._read()
        except Exception as exc:  # OSError, ValueError, a store's StoreError: keep the last good set
            error = getattr(exc, "strerror", None) or str(exc)
            if error != self.last_error and self._thread is not None:
                log.warning("cannot read the cell token from %s (keeping the last one): %s", self.description, error)
            self.last_error = error
            return False
        with self._lock:
            self._tokens = tokens
        self.last_error = ""
        return True

    def refreshed(self) -> bool:
        """Re-reads the source now; True if the token sent changed (a call refused with the old one,
        e.g. made before the first admin created the token or mid-rotation, is worth retrying)."""
        before = self.sending()
        return self.reload() and self.sending() != before

    def start(self) -> "TokenSource":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="tenor-token-reload", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._reload_s):
            self.reload()

    def stop(self) -> None:
        self._stop.set()

    @property
    def tokens(self) -> TokenSet:
        with self._lock:
            return self._tokens

    def sending(self) -> str | None:
        return self.tokens.sending

    def accepts(self, offered: str) -> bool:
        return self.tokens.accepts(offered)
