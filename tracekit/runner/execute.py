"""Running the graph: a session holds the KV cache; a step runs every node once, in order.

A step runs each node as ``thunk = lambda: arm(backend, node, step, *inputs)``; with a
``node_hook`` the hook is called as ``node_hook(node, thunk)`` and must return ``thunk()``'s
result — that is where the runner wraps NVTX ranges, timing and statistics. Without a hook the
node runs directly and its launch records are dropped (with a hook they stay in
``backend.records`` for the hook to take).

Everything about the inputs is checked before the first kernel of a step (or of a whole
generation) runs: token ids in range, the prompt and the requested steps within the context.

A :class:`Model` (what :func:`load_model` returns) is a checked GGUF file (``tracekit/model/``)
with its graph, its weights per backend and ``logits``; it lives here, beside the
:class:`Session` that ``logits`` runs, so that ``tracekit/model/`` never imports the runner.
"""

from __future__ import annotations

import contextlib
import functools
import os
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gguf
import numpy as np

from tracekit.kernels.checks import KernelInputError
from tracekit.model.config import (
    EMBED,
    MATMUL,
    VECTOR,
    ModelConfig,
    ModelError,
    TensorSpec,
    check_tensors,
    expected_tensors,
    open_reader,
    read_config,
    read_tensors,
)
from tracekit.model.weights import PackedTensor, Weights
from tracekit.runner.graph import Graph, Node, build_graph
from tracekit.runner.ops import OPS, OpError, StepContext
from tracekit.runner.replay import REPLAY_MODES, StepReplay
from tracekit.runner.timers import node_timer

if TYPE_CHECKING:
    from tracekit.kernels.backend import Backend
    from tracekit.model.tokenizer import GGUFTokenizer

#: Default KV cache length when the session is not told (the model's context, capped): 4096
#: positions of a 30-layer, 3 kv-head, head_dim 64 model are 189 MB of f32 K and V.
DEFAULT_N_CTX = 4096

NodeHook = Callable[[Node, Callable[[], Any]], Any]
StepHook = Callable[[str], contextlib.AbstractContextManager[Any]]


class GenerationError(ValueError):
    """Bad generation input (token id, prompt length, step count, sampling parameters)."""


@dataclass
class StepResult:
    """One step of a generation, as passed to ``on_step``."""

    index: int  # 0 = prefill, k = decode step k
    name: str  # "prefill" or "decode k": the step's range name
    input_ids: list[int]  # tokens fed in this step
    n_past: int  # tokens in the cache before this step
    logits: np.ndarray  # float32 [n_vocab]: the last position's logits
    token: int  # the chosen next token
    is_eos: bool


@dataclass
class Sampling:
    """Greedy (``temperature == 0``) or temperature/top-k sampling with a seeded generator."""

    temperature: float = 0.0
    top_k: int = 0
    seed: int | None = None
    rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        t, k = self.temperature, self.top_k
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not np.isfinite(t) or t < 0:
            raise GenerationError(f"temperature {t!r} must be a finite number >= 0")
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise GenerationError(f"top_k {k!r} must be an integer >= 0 (0: no limit)")
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int)
        ):
            raise GenerationError(f"seed {self.seed!r} must be an integer")
        self.rng = np.random.default_rng(self.seed)

    @classmethod
    def of(cls, spec: str | dict[str, Any] | Sampling | None) -> Sampling:
        if isinstance(spec, Sampling):
            return spec
        if spec is None or spec == "greedy":
            return cls()
        if isinstance(spec, dict):
            unknown = set(spec) - {"temperature", "top_k", "seed"}
            if unknown:
                raise GenerationError(
                    f"unknown sampling parameters {sorted(unknown)} (known: temperature, top_k, "
                    "seed)"
                )
            return cls(**spec)
        raise GenerationError(
            f"sampling {spec!r} must be 'greedy' or a dict of temperature, top_k, seed"
        )

    def __call__(self, logits: np.ndarray) -> int:
        """The next token from one position's logits (host float32 [n_vocab])."""
        if self.temperature == 0.0:
            return int(np.argmax(logits))
        # max first: a tiny temperature then takes the others to -inf, never inf - inf = NaN
        z = logits.astype(np.float64)
        z = (z - z.max()) / self.temperature
        if 0 < self.top_k < z.size:
            kth = np.partition(z, -self.top_k)[-self.top_k]
            z = np.where(z >= kth, z, -np.inf)
        p = np.exp(z)
        p /= p.sum()
        return int(self.rng.choice(z.size, p=p))


def check_token_ids(ids: Sequence[Any], n_vocab: int, start: int = 0) -> list[int]:
    """Token ids as ints, each in [0, n_vocab); ``start`` offsets the positions named in errors."""
    out = []
    for i, t in enumerate(ids):
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
            raise GenerationError(f"token id {t!r} at position {start + i} is not an integer")
        t = int(t)
        if not 0 <= t < n_vocab:
            raise GenerationError(
                f"token id {t} at position {start + i} is out of range for vocab size {n_vocab} "
                f"(valid: 0 <= id < {n_vocab})"
            )
        out.append(t)
    return out


def _call(arm: Any, be: Backend, node: Node, st: StepContext, args: list[Any]) -> Any:
    """Run one node's arm; a kernel gate's error is re-raised naming the node."""
    try:
        return arm(be, node, st, *args)
    except KernelInputError as e:
        raise OpError(f"node {node.name} ({node.op}): {e}") from e


#: Recorded prefills a session keeps (Session's ``prefill_replay``): each holds all its buffers.
PREFILL_REPLAYS = 2


def pdl_missing(replay: str, backend: Any) -> str | None:
    """What programmatic dependent launches lack here, in words, or None when they can be
    made: graph replay on the cupy backend, on a device of compute capability 9.0 or newer
    (griddepcontrol)."""
    if replay != "graph" or backend.name != "cupy":
        return (
            f"programmatic dependent launch (pdl) needs replay 'graph' on the cupy backend, "
            f"not replay {replay!r} on {backend.name}"
        )
    from tracekit.kernels.cuda import compute_capability

    cc = compute_capability()
    if cc < 90:
        return (
            f"programmatic dependent launch (pdl) needs compute capability 9.0 or newer; this "
            f"device has {cc // 10}.{cc % 10}"
        )
    return None


def check_pdl(replay: str, backend: Any) -> None:
    """Raises GenerationError naming what programmatic dependent launches lack here
    (:func:`pdl_missing`)."""
    missing = pdl_missing(replay, backend)
    if missing is not None:
        raise GenerationError(missing)


class Session:
    """A model on a backend with its KV cache: run steps, or a whole generation.

    Args:
        model: a loaded :class:`Model`.
        backend: a Backend instance or name (``"numpy"``, ``"cupy"``, ``"auto"``).
        n_ctx: KV cache length in tokens (default: the model's context, at most 4096).
        replay: how decode steps after the first run (see ``tracekit/runner/replay.py``):
            ``"plan"`` replays the first decode step's recorded launches, ``"graph"`` replays it
            as a CUDA graph, ``"off"`` runs every step through the whole dispatch chain;
            ``"auto"``: ``"plan"`` on the cupy backend, ``"off"`` on numpy.
        prefill_replay: also replay untraced prefills (``replay`` ``"plan"`` or ``"graph"``):
            the first prefill of a token count at a position runs the dispatch chain and is
            recorded, a later one of the same count at the same position (other ids) replays
            it; at most :data:`PREFILL_REPLAYS` are kept (each holds its step's buffers). A
            traced step (a node hook) always runs the dispatch chain.
        pdl: capture the decode graph's kernels as programmatic dependent launches
            (``replay="graph"``, a device of compute capability 9.0 or newer): each stamped
            kernel may launch while the one before it runs and waits on the device for it
            (kernels/stamp.cuh), so the graph's per-launch gap shrinks; the same kernels, the
            same bits. ``None`` (the default): on wherever it can be (:func:`pdl_missing`),
            else off; ``True`` where it cannot be raises. ``self.pdl`` is what was chosen.

    Raises:
        ValueError: ``n_ctx`` < 1 or longer than the model's context, or a replay mode the
            backend cannot do.
    """

    def __init__(
        self,
        model: Model,
        backend: Any = "auto",
        n_ctx: int | None = None,
        replay: str = "auto",
        prefill_replay: bool = False,
        pdl: bool | None = None,
    ) -> None:
        cfg = model.config
        if n_ctx is None:
            n_ctx = min(cfg.n_ctx, DEFAULT_N_CTX)
        if not 1 <= n_ctx <= cfg.n_ctx:
            raise GenerationError(
                f"KV cache length {n_ctx} must be in [1, {cfg.n_ctx}] (the model's context)"
            )
        self.model = model
        self.backend: Backend = model.backend(backend)
        if replay == "auto":
            replay = "plan" if self.backend.name == "cupy" else "off"
        if replay not in REPLAY_MODES:
            raise GenerationError(f"replay mode {replay!r} is not one of {REPLAY_MODES}")
        if replay != "off" and self.backend.name != "cupy":
            raise GenerationError(
                f"replay mode {replay!r} needs the cupy backend (this session runs on "
                f"{self.backend.name}); use replay='off'"
            )
        if prefill_replay and replay == "off":
            raise GenerationError("prefill replay needs replay 'plan' or 'graph', not 'off'")
        if pdl:
            check_pdl(replay, self.backend)
        self.replay_mode = replay
        self.prefill_replay = prefill_replay
        self.pdl = pdl_missing(replay, self.backend) is None if pdl is None else bool(pdl)
        self._replay: StepReplay | None = None
        # recorded prefills by (tokens, position, logits rows), oldest first
        self._prefills: dict[tuple[int, int, int], StepReplay] = {}
        self.graph = model.graph
        self.n_ctx = int(n_ctx)
        self.weights = model.weights(self.backend)  # the w16 cache: made once per backend
        xp = self.backend.xp
        shape = (self.n_ctx, cfg.n_head_kv, cfg.head_dim)
        self.k_cache = [xp.zeros(shape, dtype=np.float32) for _ in range(cfg.n_layer)]
        self.v_cache = [xp.zeros(shape, dtype=np.float32) for _ in range(cfg.n_layer)]
        self.n_past = 0
        # Per node: its arm, input names and the values it is the last reader of (freed after).
        frees: dict[int, list[str]] = {}
        for name, last in self.graph.last_use.items():
            frees.setdefault(last, []).append(name)
        self._shapes: dict[tuple[int, int], list[tuple[int, ...]]] = {}
        self._plan = [
            (n, OPS[n.op].arm, n.data_inputs, tuple(frees.get(n.id, ()))) for n in self.graph
        ]

    def reset(self) -> None:
        """Forget the cached tokens (the cache memory is reused; stale rows are never read)."""
        self.n_past = 0

    def check_step(self, tokens: Sequence[Any]) -> list[int]:
        """Validate one step's tokens against the vocabulary and the room left in the cache."""
        if len(tokens) == 0:
            raise GenerationError("a step needs at least one token")
        ids = check_token_ids(tokens, self.model.config.n_vocab, self.n_past)
        if self.n_past + len(ids) > self.n_ctx:
            raise GenerationError(
                f"{len(ids)} tokens after {self.n_past} cached ones exceed the context of "
                f"{self.n_ctx} tokens"
            )
        return ids

    def run_step(
        self,
        tokens: Sequence[int],
        node_hook: NodeHook | None = None,
        all_logits: bool = False,
    ) -> np.ndarray:
        """Run the graph once over ``tokens`` (prefill: the prompt; decode: one token).

        Args:
            tokens: the step's token ids, at positions n_past .. n_past + len - 1.
            node_hook: ``node_hook(node, thunk)`` around every node; must return ``thunk()``.
            all_logits: logits of every position (True) or of the last one only (False).

        Returns:
            float32 ``[rows, n_vocab]`` on the host: every position's logits, or the last's.

        Raises:
            GenerationError: bad ids or no room in the cache (before any kernel runs).
            OpError: a node's inputs violate its op's contract (the node is named).
        """
        out = self.launch_step(tokens, node_hook, all_logits)
        return np.asarray(self.backend.to_host(out), dtype=np.float32)

    def launch_step(
        self,
        tokens: Sequence[int],
        node_hook: NodeHook | None = None,
        all_logits: bool = False,
    ) -> Any:
        """:meth:`run_step` without the wait: issue the step's launches and return the logits
        on the backend (a device array on cupy, still being computed)."""
        ids = self.check_step(tokens)
        be, nt = self.backend, len(ids)
        if nt == 1 and self._replay is not None:  # a decode step: replay the recorded one
            if self.replay_mode == "graph" and node_hook is None:
                out = self._replay.run_graph(ids[0], self.n_past)
            else:
                out = self._replay.run(ids[0], self.n_past, node_hook)
            self.n_past += 1
            return out
        rows = np.arange(nt, dtype=np.int32) if all_logits else np.array([nt - 1], np.int32)
        # one upload: tokens, positions and rows are views of one int32 buffer
        packed = np.concatenate(
            [
                np.asarray(ids, np.int32),
                np.arange(self.n_past, self.n_past + nt, dtype=np.int32),
                rows,
            ]
        )
        key = (nt, self.n_past, int(rows.size))
        replay_prefill = nt > 1 and self.prefill_replay and node_hook is None
        if replay_prefill and key in self._prefills:
            out = self._prefills[key].run_words(packed, graph=self.replay_mode == "graph")
            self.n_past += nt
            return out
        dev = be.asarray(packed)
        st = StepContext(
            n_past=self.n_past,
            nt=nt,
            nr=int(rows.size),
            inputs={"tokens": dev[:nt], "positions": dev[nt : 2 * nt], "rows": dev[2 * nt :]},
            k_cache=self.k_cache,
            v_cache=self.v_cache,
            weights=self.weights,
        )
        if nt == 1 and self.replay_mode != "off":  # the first decode step: record it
            out, self._replay = StepReplay.record(
                be, self.graph.nodes, lambda hook: self._run_nodes(st, hook), dev, node_hook
            )
            self._replay.pdl = self.pdl
        elif replay_prefill:
            while len(self._prefills) >= PREFILL_REPLAYS:
                del self._prefills[next(iter(self._prefills))]
            out, self._prefills[key] = StepReplay.record(
                be, self.graph.nodes, lambda hook: self._run_nodes(st, hook), dev, None
            )
        else:
            out = self._run_nodes(st, node_hook)
        self.n_past += nt
        return out

    def can_replay_graph(self, tokens: Sequence[int]) -> bool:
        """Whether :meth:`replay_graph` can run this step (a decode step of a graph-replay
        session whose decode step is recorded)."""
        return self.replay_mode == "graph" and self._replay is not None and len(tokens) == 1

    def replay_graph(self, tokens: Sequence[int], kind: str, stats_spec: Any = None) -> Any:
        """A decode step as one CUDA graph launch of kind ``plain``, ``timed`` or ``full`` (see
        :meth:`StepReplay.capture_graph`); returns the logits on the device. The tracer reads
        the node times and statistics from ``self.replay`` after it."""
        ids = self.check_step(tokens)
        if not self.can_replay_graph(ids):
            raise GenerationError("graph replay needs a recorded decode step of one token")
        assert self._replay is not None
        out = self._replay.run_graph(ids[0], self.n_past, kind, stats_spec)
        self.n_past += 1
        return out

    @property
    def replay(self) -> StepReplay | None:
        """The recorded decode step (None before the first decode step, or with replay off)."""
        return self._replay

    def _run_nodes(self, st: StepContext, node_hook: NodeHook | None) -> Any:
        """Every node of the graph once, in order (the whole dispatch chain); the last output."""
        be, nt = self.backend, st.nt
        values: dict[str, Any] = dict(st.inputs)
        shapes = self._shapes.get((nt, st.nr))
        if shapes is None:
            shapes = self._shapes[(nt, st.nr)] = [n.out_shape(nt, st.nr) for n in self.graph]
        out = None
        records = be.records
        for (node, arm, inputs, frees), want in zip(self._plan, shapes, strict=True):
            args = [values[i] for i in inputs]
            if node_hook is None:
                out = _call(arm, be, node, st, args)
                records.clear()
            else:
                out = node_hook(node, functools.partial(_call, arm, be, node, st, args))
            if tuple(out.shape) != want:
                raise OpError(
                    f"node {node.name} ({node.op}) produced shape {tuple(out.shape)}, "
                    f"expected {want}"
                )
            values[node.name] = out
            for name in frees:
                del values[name]
        return out

    def generate(
        self,
        prompt_ids: Sequence[int],
        steps: int,
        sampling: str | dict[str, Any] | Sampling | None = "greedy",
        node_hook: NodeHook | None = None,
        step_hook: StepHook | None = None,
        on_step: Callable[[StepResult], Any] | None = None,
        stop_at_eos: bool = True,
    ) -> list[int]:
        """Prefill ``prompt_ids``, then up to ``steps`` decode steps; returns the new token ids.

        The prefill chooses the first new token; decode step k feeds token k and chooses token
        k + 1, so a full run returns ``steps + 1`` tokens. It stops early after choosing the
        end-of-sequence token (that token is returned).

        Args:
            prompt_ids: the prompt's token ids (at least one).
            steps: the number of decode steps (>= 0).
            sampling: ``"greedy"`` or ``{"temperature": t, "top_k": k, "seed": s}``.
            node_hook: see :meth:`run_step`.
            step_hook: ``step_hook(name)`` returns a context manager entered around each step
                (``"prefill"``, ``"decode 1"``, ...).
            on_step: called with a :class:`StepResult` after each step.
            stop_at_eos: stop after the model's EOS token.

        Raises:
            GenerationError: bad ids, prompt or steps beyond the context, bad sampling (all
                checked before the first kernel runs).
        """
        cfg = self.model.config
        sampler = Sampling.of(sampling)
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
            raise GenerationError(f"steps {steps!r} must be an integer >= 0")
        if len(prompt_ids) == 0:
            raise GenerationError("the prompt is empty: give at least one token")
        ids = check_token_ids(prompt_ids, cfg.n_vocab, self.n_past)
        room = self.n_ctx - self.n_past
        if len(ids) > room:
            raise GenerationError(
                f"the prompt of {len(ids)} tokens is longer than the context of {room} tokens"
            )
        if len(ids) + steps > room:
            raise GenerationError(
                f"the prompt of {len(ids)} tokens + {steps} decode steps need "
                f"{len(ids) + steps} positions, more than the context of {room}"
            )
        eos = self.model.eos_id if stop_at_eos else None
        step_ctx = step_hook or (lambda name: contextlib.nullcontext())
        out: list[int] = []
        feed = ids
        for k in range(steps + 1):
            name = "prefill" if k == 0 else f"decode {k}"
            n_past = self.n_past
            with step_ctx(name):
                logits = self.run_step(feed, node_hook=node_hook)[-1]
            token = sampler(logits)
            out.append(token)
            if on_step is not None:
                on_step(StepResult(k, name, list(feed), n_past, logits, token, token == eos))
            if token == eos:
                break
            feed = [token]
        return out


def step_names(steps: int) -> Iterator[str]:
    """The range names of a generation's steps: ``prefill``, ``decode 1`` .. ``decode steps``."""
    yield "prefill"
    for k in range(1, steps + 1):
        yield f"decode {k}"


# -- the model ------------------------------------------------------------------------------------
def fused_tensors(
    expected: dict[str, tuple[str, tuple[int, ...]]], fused: dict[str, tuple[str, ...]]
) -> list[tuple[str, tuple[str, tuple[int, ...]]]]:
    """The tensors a model's weights hold, in the file's expected order: each fused tensor
    (``Graph.fused``) where its first part was, of its parts' kind and their rows stacked, and
    the parts left out (so a fused projection is on the device once, not twice)."""
    first = {parts[0]: name for name, parts in fused.items()}
    inside = {p for parts in fused.values() for p in parts}
    out = []
    for name, (kind, shape) in expected.items():
        if name in first:
            parts = fused[first[name]]
            rows = sum(expected[p][1][0] for p in parts)
            # fusion_plan fuses only parts of one kind and row length (by the config's shapes)
            assert all(expected[p][0] == kind and expected[p][1][1:] == shape[1:] for p in parts)
            out.append((first[name], (kind, (rows, *shape[1:]))))
        elif name not in inside:
            out.append((name, (kind, shape)))
    return out


class Model:
    """A loaded GGUF model: config, graph, tensors (memory-mapped) and tokenizer.

    Use :func:`load_model` to make one. ``logits`` runs an untraced prefill; ``tokenize`` and
    ``detokenize`` use the file's own tokenizer.
    """

    def __init__(
        self,
        path: Path,
        reader: gguf.GGUFReader,
        config: ModelConfig,
        tensors: dict[str, TensorSpec],
        fuse: bool = True,
    ) -> None:
        self.path = path
        self.reader = reader
        self.config = config
        self.tensors = tensors
        self.fuse = fuse
        types = {n: t.qtype.name for n, t in tensors.items()}
        self.graph: Graph = build_graph(config, types, fuse)
        self._tokenizer: GGUFTokenizer | None = None
        self._weights: weakref.WeakKeyDictionary[Backend, Weights] = weakref.WeakKeyDictionary()
        self._backends: dict[Any, Backend] = {}

    def __repr__(self) -> str:
        c = self.config
        return (
            f"Model({self.path.name!r}, arch={c.arch}, n_layer={c.n_layer}, n_embd={c.n_embd}, "
            f"n_vocab={c.n_vocab})"
        )

    # -- tokenizer -----------------------------------------------------------------------------
    @property
    def tokenizer(self) -> GGUFTokenizer:
        """The file's tokenizer (built on first use); raises TokenizerError if it has none."""
        if self._tokenizer is None:
            from tracekit.model.tokenizer import load_tokenizer  # tokenizers: on first use

            self._tokenizer = load_tokenizer(self.reader)
        return self._tokenizer

    def tokenize(self, text: str, add_bos: bool | None = None) -> list[int]:
        """Token ids of ``text`` (a BOS first when the file says so, or ``add_bos``)."""
        return self.tokenizer.encode(text, add_bos=add_bos)

    def detokenize(self, ids: Any) -> str:
        return self.tokenizer.decode([int(i) for i in ids])

    @property
    def eos_id(self) -> int | None:
        """The end-of-sequence id from the metadata (None when the file has none)."""
        v = self.reader.fields.get("tokenizer.ggml.eos_token_id")
        if v is None:
            return None
        eos = int(v.contents())
        return eos if 0 <= eos < self.config.n_vocab else None

    # -- weights -------------------------------------------------------------------------------
    def backend(
        self, backend: Any = "auto", matmul: str | None = None, w16_cache: str = "auto"
    ) -> Backend:
        """A backend by name (and matmul path, w16 cache mode: ``kernels/matmul.py``), one
        instance per such triple per model (so its weights stay cached)."""
        from tracekit.kernels.backend import Backend, get_backend

        if isinstance(backend, Backend):
            return backend
        key = backend if matmul is None and w16_cache == "auto" else (backend, matmul, w16_cache)
        if key not in self._backends:
            self._backends[key] = get_backend(backend, matmul, w16_cache)
        return self._backends[key]

    def weights(self, backend: Backend) -> Weights:
        """This model's tensors on ``backend``, prepared once (the w16 cache) and cached."""
        w = self._weights.get(backend)
        if w is None:
            w = self._prepare(backend)
            self._weights[backend] = w
        return w

    def _prepare(self, backend: Backend) -> Weights:
        pending = backend.take_records()  # keep whatever the caller had queued
        backend.synchronize()
        t0 = backend.now()
        matmul: dict[str, Any] = {}
        vectors: dict[str, Any] = {}
        embed: PackedTensor | None = None
        expected = expected_tensors(self.config)
        matmul_bytes = sum(
            self.tensors[n].nbytes
            for n, (kind, _) in expected.items()
            if kind == MATMUL or (kind == EMBED and self.config.tied_output)
        )
        w16 = backend.w16_cache_on(matmul_bytes)  # the seed's rule for --w16-cache auto
        loaded = fused_tensors(expected, self.graph.fused)
        fused = self.graph.fused
        cached = [n for n, (kind, _) in loaded if kind == MATMUL] + (
            [n for n, (kind, _) in loaded if kind == EMBED and self.config.tied_output]
        )
        timer = node_timer(backend, len(cached)) if w16 else None
        load_nodes: list[dict[str, Any]] = []
        if timer is not None:
            timer.begin()  # one clock for the whole load phase

        def make(name: str, raw: Any, t: TensorSpec, shape: Any) -> Any:
            if timer is None:
                return backend.matmul_weight(raw, t.quant, shape, w16)
            backend.warm_dequant(t.quant)  # compiled before the clock starts
            i = len(load_nodes)
            before = len(backend.records)
            timer.start(i)
            w = backend.matmul_weight(raw, t.quant, shape, w16)
            timer.stop(i)
            load_nodes.append(
                {"weight": name, "shape": [int(s) for s in shape], "weight_type": t.quant.name,
                 "launches": [r.to_json() for r in backend.records[before:]]}
            )  # fmt: skip
            return w

        def vector(t: TensorSpec) -> np.ndarray:
            return gguf.quants.dequantize(t.raw(), t.qtype).astype(np.float32).reshape(-1)

        for name, (kind, shape) in loaded:
            if name in fused:  # made here from its parts' bytes; the parts are not kept
                parts = [self.tensors[p] for p in fused[name]]
                if kind == VECTOR:
                    host = np.concatenate([vector(p) for p in parts])
                    vectors[name] = backend.asarray(host, np.float32)
                else:
                    raw = backend.asarray(np.concatenate([p.raw() for p in parts]))
                    matmul[name] = make(name, raw, parts[0], shape)
                continue
            t = self.tensors[name]
            if kind == VECTOR:
                vectors[name] = backend.asarray(vector(t).reshape(shape), np.float32)
            elif kind == MATMUL:
                raw = backend.asarray(t.raw())
                matmul[name] = make(name, raw, t, shape)
            else:
                raw = backend.asarray(t.raw())
                embed = PackedTensor(raw, t.quant, (int(shape[0]), int(shape[1])))
                if self.config.tied_output:
                    matmul[name] = make(name, raw, t, shape)
        if timer is not None:
            timer.end()
        backend.synchronize()
        seconds = backend.now() - t0
        if timer is not None:
            for n, dt in zip(load_nodes, timer.times(len(load_nodes)), strict=True):
                n["time_s"] = dt
        records = backend.take_records()
        backend.records.extend(pending)
        assert embed is not None
        return Weights(backend, embed, matmul, vectors, records, seconds, load_nodes)

    # -- running -------------------------------------------------------------------------------
    def logits(self, token_ids: Any, backend: Any = "auto") -> np.ndarray:
        """The prompt's logits at every position (one untraced prefill).

        Args:
            token_ids: the prompt's token ids (a sequence of ints).
            backend: ``"numpy"``, ``"cupy"``, ``"auto"`` or a Backend instance.

        Returns:
            float32 ``[n_tokens, n_vocab]`` on the host.

        Raises:
            ValueError: an empty prompt, an id outside the vocabulary (id, position and vocab
                size named), or a prompt longer than the model's context.
        """
        ids = list(token_ids)  # validated (integers, in range) by the session before any kernel
        be = self.backend(backend)
        session = Session(self, be, n_ctx=max(1, min(len(ids), self.config.n_ctx)))
        return session.run_step(ids, all_logits=True)


def load_model(path: str | os.PathLike[str], fuse: bool = True) -> Model:
    """Open and validate a GGUF model (``tracekit.load_model``).

    Args:
        path: a ``.gguf`` file of one of ``tracekit.model.config.SUPPORTED_ARCHS``.
        fuse: run q/k/v and gate/up as one matmul each where their weights share a GGML type
            (``runner.graph.fusion_plan``); False keeps one matmul node per projection.

    Returns:
        A :class:`Model` (tensors stay memory-mapped; backend forms are made on first use):
        ``logits(token_ids, backend="auto")`` (the prompt's logits at every position, float32
        ``[n_tokens, n_vocab]``, one untraced prefill), ``tokenize(text)`` /
        ``detokenize(ids)`` with the file's own tokenizer, ``config`` and ``graph``.

    Raises:
        ModelError: the file is missing or malformed, the architecture is unsupported, metadata
            is missing or inconsistent, or tensors are missing, extra, of the wrong shape or of
            an unsupported type — all problems listed, one per line.
    """
    p = Path(path)
    reader = open_reader(p)
    tensors = read_tensors(reader)
    cfg, problems = read_config(reader, tensors)
    if cfg is not None:
        problems = check_tensors(cfg, tensors)
    if problems or cfg is None:
        raise ModelError(problems, p)
    return Model(p, reader, cfg, tensors, fuse)
