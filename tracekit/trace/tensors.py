"""The tensor sidecar of a trace: full node outputs (``--dump REGEX``) and logits (``--save-logits``).

A trace holds summary statistics and 8-bit heatmaps; to find the node that broke a run one
needs the tensors themselves. They go into ONE safetensors file next to the trace,
``NAME.<sha256 prefix>.safetensors`` for trace ``NAME.json``, which the trace names in its
``tensors`` object together with the file's SHA-256 and size (docs/trace-format.md).

Why safetensors: a flat, documented container (an 8-byte header length, a JSON header of
name -> dtype, shape, byte range, then raw little-endian data) that NumPy, PyTorch, JAX and
Hugging Face tools read without tracekit, without pickle (an ``.npz`` holds ``.npy`` members
that may carry pickled objects, and zip members are compressed or not at the writer's whim),
and whose size is exactly predictable from the shapes, so the size printed before a run is the
size of the file.

Keys: ``s{k}/{node}`` the output of ``node`` in step ``k`` (0 = prefill), as the kernel wrote
it (dtype and shape); ``logits/s{k}`` the step's logits row that chose its token (f32
[n_vocab]); ``tokens/input/s{k}`` the step's input ids and ``tokens/chosen`` the chosen id per
step (int64).

Atomic with the trace: the sidecar is written first (temp file, fsync, rename) under a name
that holds its checksum, then the trace that names it (the same way); the previous recording's
sidecar is removed last. A kill at any moment leaves at the trace path the old trace with its
old sidecar or the new trace with its new one, and never a partial file at either path (an
orphaned complete sidecar at worst, which the next write to that trace removes).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from tracekit.trace.format import TraceError, atomic_write_bytes, remove_stale_temp_files

FORMAT = "safetensors"
#: safetensors' dtype names for the dtypes a node output or a token id has.
_ST_DTYPE = {"float32": "F32", "float16": "F16", "float64": "F64", "int32": "I32", "int64": "I64"}


class DumpError(ValueError):
    """A ``--dump`` request that cannot be met (bad regex, nothing matched, unkeepable node)."""


class DumpLimitError(DumpError):
    """The sidecar's estimated size exceeds ``--dump-limit``."""


def step_key(step: int, node: str) -> str:
    return f"s{step}/{node}"


def logits_key(step: int) -> str:
    return f"logits/s{step}"


def input_tokens_key(step: int) -> str:
    return f"tokens/input/s{step}"


CHOSEN_KEY = "tokens/chosen"


def parse_size(text: str) -> int:
    """``"500M"`` -> 524288000 (K, M, G, T are powers of 1024; a plain number is bytes)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([KMGT]?)i?B?\s*", text, re.IGNORECASE)
    if m is None:
        raise ValueError(f"size {text!r} is not a number of bytes like 800M or 2G")
    scale = 1024 ** " KMGT".index(m.group(2).upper() or " ")
    return int(float(m.group(1)) * scale)


def match_nodes(nodes: Iterable[Any], regex: str) -> list[Any]:
    """The graph nodes whose whole name matches ``regex`` (``re.fullmatch``)."""
    try:
        pat = re.compile(regex)
    except re.error as e:
        raise DumpError(f"--dump {regex!r} is not a valid regular expression: {e}") from None
    return [n for n in nodes if pat.fullmatch(n.name)]


def _header_entries(entries: list[tuple[str, str, tuple[int, ...]]]) -> tuple[dict, int]:
    header: dict[str, Any] = {}
    offset = 0
    for name, dtype, shape in entries:
        n = np.dtype(dtype).itemsize * math.prod(shape)
        header[name] = {"dtype": _ST_DTYPE[dtype], "shape": list(shape),
                        "data_offsets": [offset, offset + n]}  # fmt: skip
        offset += n
    return header, offset


def file_size(entries: list[tuple[str, str, tuple[int, ...]]], metadata: dict[str, str]) -> int:
    """The size of the safetensors file holding ``entries`` (name, dtype, shape): its 8-byte
    length prefix, the JSON header (space-padded to 8 bytes, as the library writes it) and the
    data. Exact up to the digits of the byte offsets, which depend on the library's order."""
    header, data = _header_entries(sorted(entries))
    header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":"))
    return 8 + -(-len(text) // 8) * 8 + data


def planned_entries(
    nodes: list[Any], steps_tokens: list[int], n_vocab: int, save_logits: bool
) -> list[tuple[str, str, tuple[int, ...]]]:
    """What a run of ``len(steps_tokens)`` steps (token counts) will put in the sidecar for the
    matched ``nodes`` (one logit row per step: a generation selects the last position)."""
    out: list[tuple[str, str, tuple[int, ...]]] = []
    for k, nt in enumerate(steps_tokens):
        out += [(step_key(k, n.name), n.dtype, n.out_shape(nt, 1)) for n in nodes]
        if save_logits:
            out.append((logits_key(k), "float32", (n_vocab,)))
            out.append((input_tokens_key(k), "int64", (nt,)))
    if save_logits:
        out.append((CHOSEN_KEY, "int64", (len(steps_tokens),)))
    return out


def metadata(regex: str | None, save_logits: bool) -> dict[str, str]:
    return {"format": "tracekit-tensors", "dump": regex or "", "logits": str(bool(save_logits))}


class Dumps:
    """What a recording keeps for the sidecar: node outputs and logits, per step index."""

    def __init__(self, regex: str | None, node_ids: list[int], save_logits: bool) -> None:
        self.regex = regex
        self.node_ids = node_ids
        self.save_logits = save_logits
        self.outputs: dict[int, dict[str, np.ndarray]] = {}  # step -> node name -> array
        self.logits: dict[int, tuple[np.ndarray, list[int], int]] = {}

    def add_outputs(self, step: int, outputs: dict[str, np.ndarray]) -> None:
        self.outputs[step] = outputs

    def add_logits(self, step: int, logits: np.ndarray, feed: list[int], chosen: int) -> None:
        if self.save_logits:
            row = np.array(logits, dtype=np.float32).reshape(-1)
            self.logits[step] = (row, list(feed), int(chosen))

    def tensors(self, steps: Iterable[int]) -> dict[str, np.ndarray]:
        """The sidecar's tensors for the steps the trace holds (an interrupted run: fewer)."""
        out: dict[str, np.ndarray] = {}
        chosen: list[int] = []
        for k in steps:
            for name, arr in self.outputs.get(k, {}).items():
                out[step_key(k, name)] = np.ascontiguousarray(arr)
            if self.save_logits and k in self.logits:
                row, feed, tok = self.logits[k]
                out[logits_key(k)] = row
                out[input_tokens_key(k)] = np.asarray(feed, dtype=np.int64)
                chosen.append(tok)
        if self.save_logits:
            out[CHOSEN_KEY] = np.asarray(chosen, dtype=np.int64)
        return out


def sidecar_name(trace_path: Path, digest: str) -> str:
    return f"{trace_path.stem}.{digest[:16]}.safetensors"


def _sidecar_pattern(trace_path: Path) -> re.Pattern[str]:
    return re.compile(re.escape(trace_path.stem) + r"\.[0-9a-f]{16}\.safetensors")


def write_sidecar(
    trace_path: str | os.PathLike[str], tensors: dict[str, np.ndarray], meta: dict[str, str]
) -> dict[str, Any]:
    """Write the sidecar of the trace at ``trace_path`` atomically; returns the trace's
    ``tensors`` object (file name, sha256, bytes, keys) to store before writing the trace."""
    from safetensors.numpy import save

    trace_path = Path(trace_path)
    blob = save(tensors, metadata=meta)
    digest = hashlib.sha256(blob).hexdigest()
    name = sidecar_name(trace_path, digest)
    remove_stale_sidecar_temps(trace_path)
    atomic_write_bytes(trace_path.with_name(name), blob)
    return {
        "format": FORMAT,
        "file": name,
        "sha256": digest,
        "bytes": len(blob),
        "dump": meta.get("dump") or None,
        "logits": meta.get("logits") == "True",
        "count": len(tensors),
    }


def remove_stale_sidecar_temps(trace_path: str | os.PathLike[str]) -> list[Path]:
    """Remove the temp files killed writers of this trace's sidecars left (each sidecar name
    differs, so the write of the next one would not find them: same rule as the trace's,
    :func:`~tracekit.trace.format.remove_stale_temp_files`)."""
    trace_path = Path(trace_path)
    pat = re.compile(r"\.(" + _sidecar_pattern(trace_path).pattern + r")\.tmp-.*")
    removed: list[Path] = []
    try:
        names = {m.group(1) for e in os.scandir(trace_path.parent) if (m := pat.fullmatch(e.name))}
    except OSError:
        return removed
    for name in sorted(names):
        removed += remove_stale_temp_files(trace_path.with_name(name))
    return removed


def remove_old_sidecars(trace_path: str | os.PathLike[str], keep: str | None) -> list[Path]:
    """Remove the sidecars of earlier recordings to ``trace_path`` (after the new trace is in
    place): files ``STEM.<16 hex>.safetensors`` in its folder other than ``keep``."""
    trace_path = Path(trace_path)
    pat = _sidecar_pattern(trace_path)
    removed = []
    try:
        entries = list(os.scandir(trace_path.parent))
    except OSError:
        return removed
    for e in entries:
        if e.name != keep and pat.fullmatch(e.name) and e.is_file(follow_symlinks=False):
            try:
                os.unlink(e.path)
                removed.append(Path(e.path))
            except OSError:
                pass
    return removed


def sidecar_path(trace: dict[str, Any], trace_path: str | os.PathLike[str]) -> Path | None:
    t = trace.get("tensors")
    return None if not t else Path(trace_path).with_name(t["file"])


def load_tensors(
    trace: dict[str, Any], trace_path: str | os.PathLike[str]
) -> dict[str, np.ndarray] | None:
    """The trace's sidecar tensors (checksum verified), or None when it has no sidecar.

    Raises:
        TraceError: the sidecar is missing, or its checksum is not the one the trace names.
    """
    from safetensors.numpy import load

    path = sidecar_path(trace, trace_path)
    if path is None:
        return None
    try:
        blob = path.read_bytes()
    except OSError as e:
        raise TraceError(
            f"{trace_path}: its tensor sidecar {path.name} cannot be read ({e.strerror or e})"
        ) from None
    digest = hashlib.sha256(blob).hexdigest()
    if digest != trace["tensors"]["sha256"]:
        raise TraceError(
            f"{path}: sha256 {digest[:16]}... is not the {trace['tensors']['sha256'][:16]}... "
            f"that {Path(trace_path).name} names: not this trace's sidecar"
        )
    try:
        return load(blob)
    except Exception as e:  # a file with the right checksum is never malformed, but say it
        raise TraceError(f"{path}: not a readable safetensors file ({e})") from None


def step_logits(tensors: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(logits [steps, n_vocab] f32, chosen token ids [steps] int64) from a sidecar."""
    keys = sorted((int(k.split("/s")[1]), k) for k in tensors if k.startswith("logits/s"))
    if not keys:
        raise TraceError("the trace's sidecar holds no logits (record with --save-logits)")
    rows = np.stack([tensors[k] for _, k in keys]).astype(np.float32)
    return rows, tensors[CHOSEN_KEY]
