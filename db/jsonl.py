"""JSON-lines exchange format of winners: strict validation of every imported row.

One object per line, as written by :meth:`WinnerRecord.to_json`. A row with an unknown or
missing field, a wrong type, a kernel hash that is not one, an unknown dtype, a hardware
fingerprint that does not match its fields, a speedup that does not match its two times, or a
config the backend's validator rejects is an :class:`ImportRowError` naming the line. Of two rows
with the same tuning key the faster one is kept, and the report says which line was dropped.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from loopnest.db.records import CORRUPT
from loopnest.db.records import (
    HardwareInfo, WinnerRecord, dtype_names, json_object, kernel_hash, positive_float,
)

def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


# SQLite's JSON columns are read back strictly: NaN and Infinity, which json.loads accepts, are
# errors (the column reads as damaged), so a value read back is plain JSON without a second check.
# PostgreSQL's json type refuses them on the way in.
STRICT_JSON = json.JSONDecoder(parse_constant=_not_json)

ConfigValidator = Callable[[str, dict[str, Any], HardwareInfo], None]  # (backend, config, tuned-on hardware)
_HARDWARE_FIELDS = ("kind", "name", "capability", "cores", "memory_bytes", "fingerprint")


class ImportRowError(ValueError):
    """A row of an imported JSON-lines file is invalid; nothing was imported."""


def _text(value: Any, what: str, longest: int = 256) -> str:
    if not isinstance(value, str) or not value or len(value) > longest:
        raise ValueError(f"{what} must be a non-empty string of at most {longest} characters, got {value!r}")
    return value


def _backend(value: Any, what: str) -> str:
    return _text(value, what, 32)


def _sizes(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise ValueError(f"{what} must be a list of ints >= 0, got {value!r}")
    return tuple(value)


def _dtypes(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValueError(f"{what} must be a list of dtype names, got {value!r}")
    return dtype_names(value, what)


def _optional_time(value: Any, what: str) -> float | None:
    return None if value is None else positive_float(value, what)


def _optional_number(value: Any, what: str) -> float | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise ValueError(f"{what} must be a number or null, got {value!r}")
    return value


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{what} must be true or false, got {value!r}")
    return value


def _timestamp(value: Any, what: str) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(_text(value, what))
    except ValueError:
        raise ValueError(f"{what} must be an ISO timestamp, got {value!r}") from None


def _stored_object(value: Any, what: str) -> dict[str, Any]:
    """A JSON object read back from the DB: plain JSON already (``STRICT_JSON``)."""
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be a dict, got {type(value).__name__}")
    return value


_COLUMNS: dict[str, Callable[[Any, str], Any]] = {
    "sizes": _sizes, "dtypes": _dtypes, "config": _stored_object, "software": _stored_object,
    "time_us": positive_float,
    "default_time_us": _optional_time, "p20_us": _optional_time, "p50_us": _optional_time, "p80_us": _optional_time,
}


def checked_row(row: Any, columns: Iterable[str]) -> dict[str, Any]:
    """``columns`` of a row, each checked as an imported row's field is; ValueError naming the
    first damaged one (``CORRUPT``: stored text that is not JSON)."""
    out = {}
    for name in columns:
        value = getattr(row, name)
        if value is CORRUPT:
            raise ValueError(f"column {name} does not hold valid JSON")
        out[name] = _COLUMNS[name](value, f"column {name}")
    return out


def _hardware(value: Any, what: str) -> HardwareInfo:
    hw = json_object(value, what)
    if sorted(hw) != sorted(_HARDWARE_FIELDS):
        raise ValueError(f"{what} must have exactly the fields {', '.join(_HARDWARE_FIELDS)}")
    fingerprint = hw.pop("fingerprint")
    info = HardwareInfo(**hw)
    if info.fingerprint != fingerprint:
        raise ValueError(
            f"{what}.fingerprint {fingerprint!r} does not match its fields ({info.fingerprint!r})"
        )
    return info


# field -> (parser, required)
_FIELDS: dict[str, tuple[Callable[[Any, str], Any], bool]] = {
    "kernel": (kernel_hash, True),
    "name": (_text, True),
    "backend": (_backend, True),
    "sizes": (_sizes, True),
    "dtypes": (_dtypes, True),
    "hardware": (_hardware, True),
    "config": (json_object, True),
    "time_us": (positive_float, True),
    "software": (json_object, True),
    "default_time_us": (_optional_time, False),
    "speedup": (_optional_number, False),  # derived: recomputed from the two times
    "stale": (_bool, False),
    "updated_at": (_timestamp, False),
}


def parse_row(text: str, validate_config: ConfigValidator) -> WinnerRecord:
    """One JSON line as a WinnerRecord; ValueError describing the first problem."""
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg})") from None
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object, got {type(row).__name__}")
    unknown = sorted(set(row) - set(_FIELDS))
    missing = sorted(k for k, (_, needed) in _FIELDS.items() if needed and k not in row)
    if unknown or missing:
        raise ValueError(f"unknown fields {unknown}, missing fields {missing}")
    v = {k: parse(row[k], k) for k, (parse, _) in _FIELDS.items() if k in row}
    try:
        validate_config(v["backend"], v["config"], v["hardware"])
    except Exception as exc:  # the validator's own error type is the backend's business
        raise ValueError(f"config rejected by the {v['backend']} validator: {exc}") from exc
    record = WinnerRecord(
        kernel_hash=v["kernel"], name=v["name"], backend=v["backend"], sizes=v["sizes"],
        dtypes=v["dtypes"], hardware=v["hardware"], config=v["config"], time_us=v["time_us"],
        default_time_us=v.get("default_time_us"), software=v["software"],
        stale=v.get("stale", False), updated_at=v.get("updated_at"),
    )
    claimed, derived = v.get("speedup"), record.speedup
    if claimed is not None and (derived is None or not math.isclose(claimed, derived, rel_tol=1e-6)):
        raise ValueError(f"speedup {claimed!r} does not match default_time_us / time_us ({derived!r})")
    _ = record.key  # the same checks as a TuningKey built in process
    return record


@dataclass
class ParsedImport:
    """The rows to import, one per tuning key, and a line for each duplicate that was dropped."""

    records: list[WinnerRecord] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)


def parse_lines(lines: Iterable[str], validate_config: ConfigValidator) -> ParsedImport:
    """Every non-blank line parsed, the faster of two rows with one key kept; ImportRowError naming
    the first bad line."""
    kept: dict[tuple, tuple[int, WinnerRecord]] = {}
    out = ParsedImport()
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            record = parse_row(text, validate_config)
        except ValueError as exc:
            raise ImportRowError(f"line {number}: {exc}; nothing was imported") from exc
        k = record.key
        key = (k.kernel_hash, k.backend, k.sizes_key, k.dtypes_key, k.hardware.fingerprint)
        if key in kept:
            (first, other) = kept[key]
            (win, won), (lose, lost) = sorted([(first, other), (number, record)], key=lambda p: p[1].time_us)
            out.duplicates.append(f"lines {first} and {number} have the same key ({record.name} at "
                                  f"{k.sizes_key}, {k.dtypes_key}): kept line {win} ({won.time_us:g} us), "
                                  f"dropped line {lose} ({lost.time_us:g} us)")
            record, number = won, win
        kept[key] = (number, record)
    out.records = [record for _, record in kept.values()]
    return out
