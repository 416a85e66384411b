"""Tuning results on disk, and the log of decisions that ``tilekit aot`` can read.

One JSON file per decision, ``<cache dir>/tune/<kernel>-<sha256>.json``, keyed like the
kernel cache (``tilekit.rt.cache_key.CacheKey``): the sha256 of the kernel's name, the
printed IR (with source locations) of its first config for the call, the tuning key (the
values, dtypes and shapes named by ``key=``, the dtypes of every tensor, the constexprs
not tuned), the arch, the toolchain and this format's version. The file::

    {"payload": {"format": 1, "kernel": ..., "key": <key text>, "digest": <sha256>,
                 "configs": [<config>, ...], "chosen": <index>, "config": <config>,
                 "timings_ms": {<label>: <median ms>}, "pruned": {<label>: <why>}},
     "sha256": <sha256 of the payload's canonical JSON>}

It is verified on read: a file that does not parse, whose checksum, format, key or
config list differ, or whose choice is out of range is a miss (logged on
``tilekit.tune`` at debug level, and counted in ``stats()['bad_records']``): the kernel
is tuned again and the file rewritten. Writes are atomic (the kernel cache's).

The log, ``<cache dir>/tune/log.jsonl`` (and ``autotune(log=PATH)``), gets one line per
decision made by timing: ``{"call": <abstract call>, "config": {...}, "timings_ms":
{...}}``, appended with one ``write`` to a file opened ``O_APPEND``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tilekit.rt import cache
from tilekit.rt.cache_key import CacheKey

FORMAT_VERSION = 1
LOG_NAME = "log.jsonl"


def _debug(message: str, *args: Any) -> None:
    import logging

    logging.getLogger("tilekit.tune").debug(message, *args)


def tune_dir() -> Path:
    return cache.cache_dir() / "tune"


def _canonical(doc: Any) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class RecordKey:
    name: str  # the kernel's name (for the file name)
    text: str  # canonical JSON of every input
    digest: str

    @staticmethod
    def of(name: str, ir_text: str, key_doc: Mapping[str, Any], arch: str,
           tools: tuple[tuple[str, str], ...] | None = None) -> RecordKey:
        """Through ``CacheKey.of``: the same inputs as a compiled kernel's key, with
        the tuning key (and this format's version) in place of the specialization."""
        spec = _canonical({"tune_format": FORMAT_VERSION, "key": key_doc})
        key = CacheKey.of(name, ir_text, spec, arch, tools)
        return RecordKey(name, key.text, key.digest)

    @property
    def filename(self) -> str:
        safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in self.name)[:64]
        return f"{safe}-{self.digest}.json"


@dataclass(frozen=True)
class Record:
    chosen: int  # index into the configs
    timings_ms: dict[str, float]
    pruned: dict[str, str]


class BadRecord(ValueError):
    """Why a record file was not used."""


def encode(key: RecordKey, configs: Sequence[Mapping[str, Any]], record: Record) -> bytes:
    payload = {"format": FORMAT_VERSION, "kernel": key.name, "key": key.text,
               "digest": key.digest, "configs": list(configs), "chosen": record.chosen,
               "config": configs[record.chosen], "timings_ms": record.timings_ms,
               "pruned": record.pruned}
    doc = {"payload": payload,
           "sha256": hashlib.sha256(_canonical(payload).encode()).hexdigest()}
    return (json.dumps(doc, sort_keys=True, indent=1) + "\n").encode()


def decode(key: RecordKey, configs: Sequence[Mapping[str, Any]], data: bytes) -> Record:
    try:
        doc = json.loads(data)
        payload = doc["payload"]
        digest = doc["sha256"]
    except (ValueError, KeyError, TypeError) as exc:
        raise BadRecord(f"not a tuning record ({type(exc).__name__}: {exc})") from None
    if not isinstance(payload, dict) or \
            hashlib.sha256(_canonical(payload).encode()).hexdigest() != digest:
        raise BadRecord("checksum mismatch")
    if payload.get("format") != FORMAT_VERSION:
        raise BadRecord(f"format {payload.get('format')!r}, expected {FORMAT_VERSION}")
    if payload.get("key") != key.text or payload.get("digest") != key.digest:
        raise BadRecord("record is for another key")
    if payload.get("configs") != list(configs):
        raise BadRecord("chosen from another list of configs")
    chosen = payload.get("chosen")
    if not isinstance(chosen, int) or isinstance(chosen, bool) or \
            not 0 <= chosen < len(configs) or payload.get("config") != configs[chosen]:
        raise BadRecord(f"bad choice {chosen!r}")
    try:
        timings = {str(k): float(v) for k, v in payload["timings_ms"].items()}
        pruned = {str(k): str(v) for k, v in payload["pruned"].items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BadRecord(f"malformed timings ({exc})") from None
    return Record(chosen, timings, pruned)


def _write_atomically(directory: Path, name: str, data: bytes) -> None:
    """The kernel cache's atomic write: a temporary file in ``directory``, fsync'd, then
    ``os.replace``'d over ``name``."""
    cache.write_atomically(directory, name, data, suffix=".json")


def path_of(key: RecordKey) -> Path:
    return tune_dir() / key.filename


def load(key: RecordKey, configs: Sequence[Mapping[str, Any]]) -> tuple[Record | None, str]:
    """The stored record for ``key`` chosen among ``configs`` (their JSON forms), or None
    and why not ("" when there is no file)."""
    path = path_of(key)
    try:
        data = path.read_bytes()
    except OSError:
        return None, ""
    try:
        return decode(key, configs, data), ""
    except BadRecord as exc:
        _debug("ignoring tuning record %s: %s", path, exc)
        return None, str(exc)


def save(key: RecordKey, configs: Sequence[Mapping[str, Any]], record: Record) -> Path | None:
    """Write the record atomically; an unwritable cache is not an error (the kernel is
    tuned again next time). The path written, or None."""
    try:
        _write_atomically(tune_dir(), key.filename, encode(key, configs, record))
    except OSError as exc:
        _debug("could not write tuning record %s: %s", key.filename, exc)
        return None
    return path_of(key)


def append_log(line: Mapping[str, Any], extra: Path | None = None) -> None:
    """One JSON line to ``<cache dir>/tune/log.jsonl`` (and to ``extra``), each with a
    single ``write`` of a file opened for appending, so concurrent writers do not
    interleave within a line. A log that cannot be written is logged, not raised."""
    text = (json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n").encode()
    paths = [tune_dir() / LOG_NAME] + ([Path(extra)] if extra is not None else [])
    for path in paths:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, text)
            finally:
                os.close(fd)
        except OSError as exc:
            _debug("could not append to the tuning log %s: %s", path, exc)


def read_log(path: Path | None = None) -> list[dict[str, Any]]:
    """The log's decisions, oldest first; lines that do not parse (a crash mid-write) are
    skipped."""
    path = Path(path) if path is not None else tune_dir() / LOG_NAME
    out = []
    try:
        text = path.read_text()
    except OSError:
        return []
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and "call" in doc and "config" in doc:
            out.append(doc)
    return out
