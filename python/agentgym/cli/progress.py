"""Progress of long work on one stream, readable on a terminal and in a log file.

On a terminal the line is redrawn in place (``\\r``) a few times a second. Anywhere else (a
pipe, a log file, CI) each update is a whole line of its own, written at most every
``LOG_EVERY_S`` seconds and once at the end, so a log holds plain lines, never carriage returns.
"""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO

TTY_EVERY_S = 0.2
LOG_EVERY_S = 10.0


class Progress:
    """One progress line on ``stream`` (default: stderr)."""

    def __init__(self, stream: TextIO | None = None, every_s: float | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = _isatty(self.stream)
        self.every_s = (
            every_s if every_s is not None else (TTY_EVERY_S if self.tty else LOG_EVERY_S)
        )
        self.started = time.monotonic()
        self._last = -math.inf
        self._shown = ""

    def show(self, text: str, *, force: bool = False) -> None:
        """Show ``text`` now if the last update is ``every_s`` old (or ``force``)."""
        now = time.monotonic()
        if not force and now - self._last < self.every_s:
            return
        self._last = now
        if self.tty:
            self.stream.write("\r" + text.ljust(len(self._shown)))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self._shown = text

    def finish(self, text: str | None = None) -> None:
        """Show ``text`` (the final state) whatever the time, and end the line."""
        if text is not None:
            self.show(text, force=True)
        if self.tty and self._shown:
            self.stream.write("\n")
            self.stream.flush()
        self._shown = ""

    def eta(self, done: int, total: int) -> str:
        """Time left at the pace so far ("?" before the first item)."""
        if done < 1:
            return "?"
        return duration((time.monotonic() - self.started) / done * max(total - done, 0))

    def elapsed(self) -> str:
        """Time since the progress started."""
        return duration(time.monotonic() - self.started)


def duration(seconds: float) -> str:
    """``42s``, ``3m05s`` or ``2h03m``."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no such method, or a closed stream
        return False
