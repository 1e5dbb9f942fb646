"""Reads a schedule file (contract `optlease-schedule/1`) as a stream: its top-level members one by one and the
members of `leases` one lease at a time, each parsed by the standard library's JSON decoder (`raw_decode`) over a
window of the file's text. Memory is bounded by one lease's text and what it parses to, not by the file: a year of
a large site (25 million VMs, a file of a few GB) takes over 10 GB as one document in memory.

The grammar is JSON's, strictly: the errors are those of `json.loads` at the same line and column (so `optlease
check` says the same of a broken file either way), and a fault the whole-file reader cannot meet is named the same
way, in one line: a member or a lease longer than `MAX_ITEM` characters of text (a 1 GB string), nesting deeper
than the decoder goes, a top-level key given twice (which of the two a reader takes is not said by JSON; in a stream
the first one's leases would already have been read)."""
from __future__ import annotations

import codecs
import json
import re
from pathlib import Path
from typing import Any, Iterator

from optlease.errors import InputError

FORMAT = "optlease-schedule/1"
CHUNK = 1 << 22          # text read at a time: 4 MiB
MAX_ITEM = 1 << 26       # the most text one lease or one other top-level member may take: 64 MiB
_WS = re.compile(r"[ \t\n\r]*")
_SLACK = 64              # an error this near the window's end may only be the window's end: read on


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


_DECODER = json.JSONDecoder(parse_constant=_not_json)


class ScheduleStream:
    """A schedule file read front to back. `members()` gives each top-level (key, value); the value of `leases`,
    when it is an array, is an iterator of (position, lease) that `members()` drains if its caller does not."""

    def __init__(self, path: Path, chunk: int = CHUNK, max_item: int = MAX_ITEM) -> None:
        self.where, self.chunk, self.max_item = str(path), chunk, max_item
        try:
            self.file = open(path, "rb")
        except FileNotFoundError:
            raise InputError("no such file", self.where) from None
        except IsADirectoryError:
            raise InputError("is a directory, not a schedule file", self.where) from None
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror or exc}", self.where) from None
        self.utf8 = codecs.getincrementaldecoder("utf-8")("strict")
        self.buf, self.pos, self.eof = "", 0, False
        self.lines, self.column, self.read_bytes = 0, 0, 0   # newlines and column at buf[0]; bytes read so far

    def close(self) -> None:
        self.file.close()

    # --- the window of text ---------------------------------------------------------------------------------------

    def _more(self, size: int) -> bool:
        """Drops what is read, appends `size` more bytes' text; False at the end of the file."""
        if self.eof:
            return False
        try:
            data = self.file.read(size)
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror or exc}", self.where) from None
        pending = len(self.utf8.getstate()[0])
        try:
            text = self.utf8.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 text (byte {self.read_bytes - pending + exc.start})", self.where) from None
        self.read_bytes += len(data)
        self.eof = not data
        done = self.pos
        newlines = self.buf.count("\n", 0, done)
        if newlines:
            self.lines += newlines
            self.column = done - self.buf.rfind("\n", 0, done) - 1
        else:
            self.column += done
        self.buf, self.pos = self.buf[done:] + text, 0
        return bool(data)

    def _grow(self, what: str) -> None:
        """More text for the value at `pos`, which runs past the window; refused past MAX_ITEM."""
        if len(self.buf) - self.pos > self.max_item:
            raise self._error(self.pos, f"{what} is longer than {self.max_item >> 20} MiB of text, more than a "
                                        "schedule's member or lease may be")
        self._more(max(self.chunk, len(self.buf) - self.pos))

    def _error(self, at: int, message: str) -> InputError:
        """The fault at buf[at], placed as json.loads places it (line and column from 1)."""
        last = self.buf.rfind("\n", 0, at)
        line = self.lines + self.buf.count("\n", 0, at) + 1
        column = at - last if last >= 0 else self.column + at + 1
        return InputError(f"line {line} column {column}: {message}", self.where)

    def _peek(self) -> str:
        """The next character that is not white space ('' at the end of the file)."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or not self._more(self.chunk):
                return self.buf[self.pos:self.pos + 1]

    def _value(self, what: str) -> Any:
        """The JSON value at the next character, parsed whole."""
        self._peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if not self.eof and (exc.pos >= len(self.buf) - _SLACK or exc.msg.startswith("Unterminated")):
                    self._grow(what)
                    continue
                raise self._error(exc.pos, exc.msg) from None
            except RecursionError:
                raise self._error(self.pos, f"{what} nests deeper than this reader goes") from None
            except ValueError as exc:   # NaN, Infinity; a number of more digits than Python reads
                raise InputError(f"not valid JSON: {exc}", self.where) from None
            if end >= len(self.buf) and not self.eof:   # a number or literal may go on past the window
                self._grow(what)
                continue
            self.pos = end
            return value

    # --- the document ---------------------------------------------------------------------------------------------

    def members(self) -> Iterator[tuple[str, Any]]:
        first = self._peek()
        if first == "\ufeff":
            raise self._error(self.pos, "Unexpected UTF-8 BOM (decode using utf-8-sig)")
        if first != "{":
            doc = self._value("the document")
            self._end()
            raise InputError(f"not a schedule: the document is a JSON {type(doc).__name__}, not an object",
                             self.where)
        self.pos += 1
        seen: set[str] = set()
        nxt = self._peek()
        if nxt == "}":
            self.pos += 1
            self._end()
            return
        while True:
            if nxt != '"':
                raise self._error(self.pos, "Expecting property name enclosed in double quotes")
            at = self.pos
            key = self._value("a key")
            if key in seen:
                raise self._error(at, f"the top-level key {key[:40]!r} is given twice")
            seen.add(key)
            if self._peek() != ":":
                raise self._error(self.pos, "Expecting ':' delimiter")
            self.pos += 1
            if key == "leases" and self._peek() == "[":
                leases = self._leases()
                yield key, leases
                for _ in leases:    # what the caller left unread
                    pass
            else:
                yield key, self._value(f"the member {key[:40]!r}")
            nxt = self._peek()
            if nxt == "}":
                self.pos += 1
                self._end()
                return
            if nxt != ",":
                raise self._error(self.pos, "Expecting ',' delimiter")
            self.pos += 1
            nxt = self._peek()

    def _leases(self) -> Iterator[tuple[int, Any]]:
        self.pos += 1
        if self._peek() == "]":
            self.pos += 1
            return
        index = 0
        while True:
            yield index, self._value(f"leases[{index}]")
            index += 1
            nxt = self._peek()
            if nxt == "]":
                self.pos += 1
                return
            if nxt != ",":
                raise self._error(self.pos, "Expecting ',' delimiter")
            self.pos += 1

    def _end(self) -> None:
        if self._peek():
            raise self._error(self.pos, "Extra data")


def read_members(path: Path, **limits: int) -> Iterator[tuple[str, Any]]:
    """The top-level members of a schedule file, as `ScheduleStream.members` gives them; the file is closed after."""
    stream = ScheduleStream(path, **limits)
    try:
        yield from stream.members()
    finally:
        stream.close()
