"""Each trial's exact commands and raw tool output, kept with its samples so a result can be re-derived (parse the
stored text again) and re-run (the argv lists, and where each ran). The executors report every process they start
(`spawned`) and the workloads' helpers what a process printed (`output`) while a trial is being recorded; the
runner stores the record compressed (`pack`), `vnetbench export --raw TRIAL` gives it back (`unpack`)."""
from __future__ import annotations

import json
import threading
import time
import zlib
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

FORMAT = 1
MAX_OUTPUT = 16 * 2 ** 20  # characters kept of one stream: a runaway tool must not fill the results file


class TrialRecord:
    """The processes of one trial in start order: where, argv, the full command line, what each printed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.commands: list[dict[str, Any]] = []
        self._by_proc: dict[int, dict[str, Any]] = {}

    def spawned(self, where: str, argv: Sequence[str], full: Sequence[str], label: str | None, proc: Any) -> None:
        entry = {"where": where, "argv": list(argv), "command_line": list(full), "label": label,
                 "started": time.time()}
        with self._lock:
            self.commands.append(entry)
            self._by_proc[id(proc)] = entry

    def output(self, proc: Any, out: str | None, err: str | None, times: list[float] | None = None) -> None:
        """What a process printed; the first non-empty read is kept (a later stop() of a finished process reads
        nothing). `times`: when each stdout line arrived here, for a tool read as it runs (workloads.base.Stamped),
        whose intervals are placed by their arrival."""
        with self._lock:
            entry = self._by_proc.get(id(proc))
            if entry is None:
                return
            for key, text in (("stdout", out), ("stderr", err)):
                if text and key not in entry:
                    entry[key] = text[:MAX_OUTPUT]
            if times and "stdout_line_times" not in entry:
                entry["stdout_line_times"] = times
            if getattr(proc, "returncode", None) is not None:
                entry["returncode"] = proc.returncode

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            return {"format": FORMAT, "commands": [dict(c) for c in self.commands]}


_active: TrialRecord | None = None  # one trial at a time per process (its background loads run in threads)


@contextmanager
def recording() -> Iterator[TrialRecord]:
    global _active
    record, previous = TrialRecord(), _active
    _active = record
    try:
        yield record
    finally:
        _active = previous


def spawned(where: str, argv: Sequence[str], full: Sequence[str], label: str | None, proc: Any) -> None:
    if _active is not None:
        _active.spawned(where, argv, full, label, proc)


def output(proc: Any, out: str | bytes | None, err: str | bytes | None, times: list[float] | None = None) -> None:
    if _active is not None:
        _active.output(proc, _text(out), _text(err), times)


def _text(value: str | bytes | None) -> str | None:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def pack(record: TrialRecord) -> bytes:
    return zlib.compress(json.dumps(record.as_dict()).encode(), 6)


def unpack(blob: bytes) -> dict[str, Any]:
    return json.loads(zlib.decompress(blob))
