"""SHA-1 and SHA-256 as hex, and BLAKE2b, without importing hashlib for small inputs.

Importing hashlib starts OpenSSL: 4 ms of every short command (a claim, a renewal, a step).
CPython's own modules give the same digests and cost nothing to import (`random` takes
`_sha512` the same way); a megabyte or more goes to OpenSSL, whose speed then pays for its start.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

LARGE = 1 << 20  # bytes from which OpenSSL's digests are worth importing hashlib for

_SHA1: Callable[[bytes], Any] | None
_SHA256: Callable[[bytes], Any] | None
try:
    from _sha1 import sha1 as _SHA1  # type: ignore[import-not-found,no-redef]
except ImportError:
    _SHA1 = None
try:
    from _sha2 import sha256 as _SHA256  # type: ignore[import-not-found,no-redef]  # Python 3.12 and later
except ImportError:
    try:
        from _sha256 import sha256 as _SHA256  # type: ignore[import-not-found,no-redef]
    except ImportError:
        _SHA256 = None

_BLAKE2B: Callable[..., Any] | None
try:
    from _blake2 import blake2b as _BLAKE2B  # what hashlib.blake2b is
except ImportError:
    _BLAKE2B = None


def sha1_hex(data: bytes) -> str:
    if _SHA1 is None or len(data) >= LARGE:
        import hashlib

        return hashlib.sha1(data).hexdigest()
    return str(_SHA1(data).hexdigest())


def sha256_hex(data: bytes) -> str:
    if _SHA256 is None or len(data) >= LARGE:
        import hashlib

        return hashlib.sha256(data).hexdigest()
    return str(_SHA256(data).hexdigest())


def blake2b_digest(data: bytes, size: int) -> bytes:
    """BLAKE2b of `data`, `size` bytes long (hashlib's own, without hashlib's start)."""
    if _BLAKE2B is None:
        import hashlib

        return hashlib.blake2b(data, digest_size=size).digest()
    return bytes(_BLAKE2B(data, digest_size=size).digest())
