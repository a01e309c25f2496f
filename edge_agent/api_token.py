"""The agent's API token file: made once by the agent, read by its clients on the same box.

The file holds one line, the token (32 random bytes, URL-safe base64). Only its owner may
read it: the agent refuses a file that others can read, so a token that has been readable
by every user of the box is never trusted. Clients send ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

from edge_agent.errors import InvalidInput

#: The token file's name in the agent's data_dir unless ``[api] auth_token_file`` names one.
DEFAULT_TOKEN_FILE = "api_token"
#: Random bytes of a new token (43 characters once encoded).
TOKEN_BYTES = 32
#: Fewest characters of a token an operator writes into the file.
MIN_TOKEN_CHARS = 16
#: The header clients send and its scheme (RFC 6750).
HEADER, SCHEME = "Authorization", "Bearer"


class TokenFileError(InvalidInput):
    """The API token file cannot be made, read or trusted; the message says what to run."""


def bearer(token: str) -> dict[str, str]:
    """Return the request header that carries ``token``."""
    return {HEADER: f"{SCHEME} {token}"}


def ensure_token(path: Path) -> str:
    """Return the token in ``path``, first making the file (mode 0600) if there is none.

    TokenFileError when the file is not a regular file, others may read or write it, or it
    holds no usable token: each message names the file and the command that fixes it.
    """
    try:
        return _create(path)
    except FileExistsError:
        pass
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise TokenFileError(
                f"API token file {path} is a symbolic link; point [api] auth_token_file at "
                "the file itself"
            ) from None
        raise TokenFileError(f"cannot read the API token file {path}: {err.strerror}") from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise TokenFileError(f"API token file {path} is not a regular file")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise TokenFileError(
                f"API token file {path} has mode {mode:04o}: other users may read it, so the "
                f"token may be known; run `chmod 600 {path}` (or delete the file: a new token "
                "is made at the next start)"
            )
        return _checked(file.read(4096), path)


def read_token(path: Path) -> str | None:
    """Return the token in ``path`` for a client; None when the file is missing or unreadable."""
    try:
        data = path.read_bytes()[:4096]
    except OSError:  # no token made (auth off) or not ours to read: the agent's 401 says so
        return None
    try:
        return _checked(data, path)
    except TokenFileError:
        return None


def _create(path: Path) -> str:
    """Make ``path`` holding a new token, readable by its owner only; FileExistsError if any."""
    token = secrets.token_urlsafe(TOKEN_BYTES)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as err:
        if isinstance(err, FileExistsError):
            raise
        raise TokenFileError(f"cannot create the API token file {path}: {err.strerror}") from None
    with os.fdopen(fd, "w", encoding="ascii") as out:
        os.fchmod(out.fileno(), 0o600)
        out.write(token + "\n")
    return token


def _checked(data: bytes, path: Path) -> str:
    """Return the token in a file's bytes; TokenFileError unless it is one usable token."""
    text = data.decode("ascii", "replace").strip()
    if len(text) < MIN_TOKEN_CHARS or not all("!" <= ch <= "~" for ch in text):
        raise TokenFileError(
            f"API token file {path} holds no usable token (expected one line of at least "
            f"{MIN_TOKEN_CHARS} printable ASCII characters, no spaces); delete it and a new "
            "one is made at the next start"
        )
    return text
