"""The one kind of error users see: bad input, named by where it is and what is wrong with it."""
from __future__ import annotations


class InputError(ValueError):
    """Bad input from a user: a file, an option, a request. `where` names the place (file:line, [section] option)."""

    def __init__(self, message: str, where: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.where = where

    def located(self, where: str) -> "InputError":
        """The same error, placed (kept as is when it already names a place)."""
        if self.where is None:
            self.where = where
        return self

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message
