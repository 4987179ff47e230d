"""The exception the codec raises (a module of its own so that the C++ extension can raise it)."""

from __future__ import annotations

from typing import Any


class ZipcommError(Exception):
    """A zipcomm codec operation ended with a Status other than ok.

    Attributes:
        status: the ``zipcomm.Status`` member (``status.name`` is its C++ name, e.g. ``"checksum_mismatch"``).

    The message is where it happened, the status in words (``zipcomm::status_string``) and its name, e.g.
    ``zipcomm.decompress: checksum mismatch (Status.checksum_mismatch)``.
    """

    def __init__(self, message: str, status: Any) -> None:
        super().__init__(f"{message} (Status.{status.name})")
        self.message = message
        self.status = status

    def __reduce__(self) -> tuple[Any, ...]:
        # The default would rebuild from the formatted message alone, without the status.
        return (type(self), (self.message, self.status))
