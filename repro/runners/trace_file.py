"""A recorded KL trace read from CSV: chunked, bounded, every value checked as the float32 the kernel reads.

The format: UTF-8 CSV (a byte-order mark and CRLF line ends are accepted), a header line naming a ``kl``
column and optionally a ``kl_target`` column, one row per training step; blank rows are skipped.

:func:`read` parses the file in chunks of :data:`CHUNK_ROWS` rows with pandas' C parser, so memory grows with
the float values kept, not with the text, and stops at ``max_rows`` (:data:`MAX_ROWS` unless raised) before
reading further. Where pandas refuses a chunk (a cell that is no number, ``nan`` written out, a missing cell)
or a value fails a check, the file is read again row by row from the start: that reading says which line and
why, in the same words whatever the chunking, and accepts what Python's ``float`` accepts.
"""

from __future__ import annotations

import array
import csv
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from repro.core.errors import SuiteError
from repro.core.f32 import F32

#: The most data rows :func:`read` takes unless told otherwise (replay's ``--max-rows``). Measured on 5 million
#: rows through both controllers: 0.29 GB peak memory, 2.5 GB with ``--csv`` (the tidy frame and its text).
MAX_ROWS = 10_000_000
#: The largest ``max_rows`` a caller may ask for.
MAX_ROWS_LIMIT = 1_000_000_000
#: Rows parsed at a time.
CHUNK_ROWS = 500_000
#: Seconds of reading before the first progress line, then between lines.
PROGRESS_AFTER_S = 3.0


@dataclass(frozen=True)
class Trace:
    """The KL and target of each step (float32 ``[T]``) as the kernel will read them."""

    path: Path
    kl: np.ndarray
    target: np.ndarray


class _Refused(Exception):
    """The fast reading cannot take this file as it is: read it row by row (which says why, or takes it)."""


def read(path: Path | str, target: float | None = None, allow_nonfinite: bool = False, max_rows: int = MAX_ROWS,
         progress: Callable[[str], None] | None = None) -> Trace:
    """The trace at ``path``; the target from its ``kl_target`` column or ``target`` (exactly one of them,
    positive and finite as float32). NaN/inf values are refused with their line unless ``allow_nonfinite``;
    a file with more than ``max_rows`` data rows is refused. ``progress``: told how far the reading is, a line
    every few seconds once it has taken :data:`PROGRESS_AFTER_S` s. Every refusal is one :class:`SuiteError` line.
    """
    path = Path(path)
    if not 1 <= max_rows <= MAX_ROWS_LIMIT:
        raise SuiteError(f"--max-rows must be 1 to {MAX_ROWS_LIMIT:,}, not {max_rows}")
    try:
        if path.is_dir():
            raise SuiteError(f"trace file {path} is a folder; name the CSV file in it")
        if not path.is_file():
            raise SuiteError(f"trace file {path} is not a regular file" if path.exists() else
                             f"trace file not found: {path}")
    except OSError as err:  # a name too long
        raise SuiteError(f"cannot read trace file {path}: {err.strerror or err}") from None
    if target is not None:
        with np.errstate(over="ignore"):
            as32 = float(F32(target))  # what the kernel reads: 1e39 would be inf, 1e-50 would be 0
        if not (math.isfinite(as32) and as32 > 0):
            raise SuiteError(f"--target must be a positive finite KL that float32 holds (1.4e-45 to 3.4e38), not {target!r}")
    line, kl_col, tgt_col = _header(path, target)
    tell = _Progress(path, progress)
    try:
        kl, tg = _chunked(path, line, kl_col, tgt_col, allow_nonfinite, max_rows, tell)
    except _Refused:
        kl, tg = _by_row(path, line, kl_col, tgt_col, allow_nonfinite, max_rows, tell)
    if not len(kl):
        raise SuiteError(f"{path}: no KL values")
    with np.errstate(over="ignore"):  # an overflow to inf was refused unless asked for
        kl32 = kl.astype(F32)
        tg32 = np.full(len(kl), F32(target)) if tgt_col is None else tg.astype(F32)
    return Trace(path, kl32, tg32)


def _rows(fh):
    """(line, cells) of each row that is not blank."""
    return ((n, r) for n, r in enumerate(csv.reader(fh), start=1) if r and any(c.strip() for c in r))


def _open(path: Path):
    # utf-8-sig: a byte-order mark (as spreadsheet programs save CSV) is dropped; csv reads CRLF lines
    return path.open(newline="", encoding="utf-8-sig")


def _header(path: Path, target: float | None) -> tuple[int, int, int | None]:
    """(the header's line, the kl column, the kl_target column or None), every header refusal made here."""
    try:
        with _open(path) as fh:
            first = next(_rows(fh), None)
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise SuiteError(f"cannot read trace file {path}: {getattr(err, 'strerror', None) or err}") from None
    if first is None:
        raise SuiteError(f"{path}: empty trace file")
    line, cells = first
    header = [c.strip().lower() for c in cells]
    if _is_number(cells[0]):
        raise SuiteError(f"{path}:{line}: no header; the first line must name the columns (kl[,kl_target])")
    if "kl" not in header:
        other = next((name for sep, name in ((";", "';'"), ("\t", "tab")) if any(sep in c for c in cells)), None)
        hint = (f"; the file looks {other}-separated: the trace format separates columns with commas" if other
                else "")
        raise SuiteError(f"{path}: no 'kl' column (columns: {', '.join(header)}){hint}")
    for name in ("kl", "kl_target"):
        at = [i + 1 for i, h in enumerate(header) if h == name]
        if len(at) > 1:
            raise SuiteError(f"{path}:{line}: {len(at)} columns named '{name}' (columns "
                             f"{', '.join(map(str, at))}); keep one")
    kl_col = header.index("kl")
    tgt_col = header.index("kl_target") if "kl_target" in header else None
    if tgt_col is not None and target is not None:
        raise SuiteError(f"{path}: has a kl_target column and --target was given; use one of them")
    if tgt_col is None and target is None:
        raise SuiteError(f"{path}: no 'kl_target' column; give the target (--target)")
    return line, kl_col, tgt_col


def _chunked(path: Path, header_line: int, kl_col: int, tgt_col: int | None, allow_nonfinite: bool,
             max_rows: int, tell: _Progress) -> tuple[np.ndarray, np.ndarray | None]:
    """Every data row through pandas' C parser, :data:`CHUNK_ROWS` at a time (float64 values as Python's
    ``float`` reads them); :class:`_Refused` where a chunk or a value needs the row-by-row reading."""
    import pandas as pd

    cols = [kl_col] + ([] if tgt_col is None else [tgt_col])
    # before pandas 3.1 only the round-trip converter parses as Python's float does (3.1 has only that one)
    version = tuple(int(p) for p in pd.__version__.split(".")[:2] if p.isdigit())
    exact = {"float_precision": "round_trip"} if version < (3, 1) else {}
    kl, tg, rows = [], [], 0
    try:
        with path.open("rb") as raw:
            for chunk in pd.read_csv(raw, encoding="utf-8-sig", header=None, skiprows=header_line, usecols=cols,
                                     dtype=np.float64, na_filter=False, skip_blank_lines=True, chunksize=CHUNK_ROWS,
                                     **exact):
                rows += len(chunk)
                if rows > max_rows:
                    raise _too_many(path, max_rows)
                for col, kept in ((kl_col, kl), (tgt_col, tg)):
                    if col is not None:
                        values = chunk[col].to_numpy(np.float64)
                        if not _acceptable(values, allow_nonfinite):
                            raise _Refused
                        kept.append(values)
                tell(rows, raw.tell())
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError, csv.Error) as err:  # the rows say which line
        raise _Refused from err
    except OSError as err:
        raise SuiteError(f"cannot read trace file {path}: {err.strerror or err}") from None
    joined = np.concatenate(kl) if kl else np.empty(0)
    return joined, (np.concatenate(tg) if tg else None)


def _acceptable(values: np.ndarray, allow_nonfinite: bool) -> bool:
    """Whether every value passes :func:`_cell`'s checks (vectorised; the row-by-row reading names the first
    that does not)."""
    with np.errstate(over="ignore"):
        as32 = values.astype(F32)
    finite = np.isfinite(values)
    if not allow_nonfinite and not (finite.all() and np.isfinite(as32).all()):
        return False
    return not ((values != 0) & (as32 == 0)).any()


def _by_row(path: Path, header_line: int, kl_col: int, tgt_col: int | None, allow_nonfinite: bool,
            max_rows: int, tell: _Progress) -> tuple[np.ndarray, np.ndarray | None]:
    """Every data row through Python's csv and ``float``, the first refusal with its line."""
    kl, tg, rows = array.array("d"), array.array("d"), 0
    try:
        with _open(path) as fh:
            for line, row in _rows(fh):
                if line <= header_line:
                    continue
                rows += 1
                if rows > max_rows:
                    raise _too_many(path, max_rows)
                kl.append(_cell(row, kl_col, path, line, allow_nonfinite))
                if tgt_col is not None:
                    tg.append(_cell(row, tgt_col, path, line, allow_nonfinite))
                if rows % CHUNK_ROWS == 0:
                    tell(rows, None)
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise SuiteError(f"cannot read trace file {path}: {getattr(err, 'strerror', None) or err}") from None
    return np.frombuffer(kl, dtype=np.float64), (np.frombuffer(tg, dtype=np.float64) if tgt_col is not None else None)


def _too_many(path: Path, max_rows: int) -> SuiteError:
    return SuiteError(f"{path}: more than {max_rows:,} rows, the replay's limit (a million rows hold about 60 MB, "
                      "500 MB with --csv); --max-rows N raises it")


class _Progress:
    """Calls ``progress`` with the rows read (and how much of the file) once reading has taken a few seconds,
    then every few seconds."""

    def __init__(self, path: Path, progress: Callable[[str], None] | None):
        self.progress, self.start = progress, time.monotonic()
        self.next = self.start + PROGRESS_AFTER_S
        try:
            self.size = path.stat().st_size
        except OSError:
            self.size = 0

    def __call__(self, rows: int, at: int | None) -> None:
        now = time.monotonic()
        if self.progress is None or now < self.next:
            return
        self.next = now + PROGRESS_AFTER_S
        share = f" ({min(at / self.size, 1):.0%} of the file)" if at is not None and self.size else ""
        self.progress(f"read {rows:,} rows{share} in {now - self.start:.0f} s")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _cell(row: list[str], col: int, path: Path, line: int, allow_nonfinite: bool) -> float:
    """``row[col]``, refused (one line) when it is no number or when float32, as the kernel will read it, changes
    its kind: finite to ±inf (above 3.4e38), or non-zero to 0 (below 1.4e-45). NaN/inf as written pass only with
    ``allow_nonfinite``, and so does a finite value that overflows (it is fed as the inf it becomes)."""
    try:
        value = float(row[col])
    except (IndexError, ValueError):
        shown = row[col] if col < len(row) else "(missing)"
        hint = "; the file looks ';'-separated: the trace format separates columns with commas" if ";" in shown else ""
        raise SuiteError(f"{path}:{line}: not a number: {shown!r}{hint}") from None
    what = f"{path}:{line}: {row[col].strip()!r}"
    with np.errstate(over="ignore"):
        as32 = float(F32(value))
    if not math.isfinite(value) and not allow_nonfinite:
        raise SuiteError(f"{what} is not finite (--allow-nonfinite feeds it as recorded)")
    if math.isfinite(value) and not math.isfinite(as32) and not allow_nonfinite:
        raise SuiteError(f"{what} overflows float32 (largest {float(np.finfo(F32).max):.4g}): it would be fed as inf "
                         "(--allow-nonfinite feeds it so)")
    if value != 0 and as32 == 0:
        raise SuiteError(f"{what} is below float32's smallest subnormal (1.4e-45): it would be fed as 0 "
                         "(write 0 if 0 is meant)")
    return value
