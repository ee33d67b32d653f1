"""Hop 1 of the dispatch chain: the forward graph, as named nodes in execution order.

    runner/ (graph op)  ->  backend method  ->  launcher (grid contract)  ->  kernel

A node knows its op, kernel family, inputs (other nodes' names, the step inputs ``tokens``,
``positions`` and ``rows``, or ``weight:<tensor name>``), attributes and output shape; it does
not know grid sizes. The name is the NVTX range message, the trace's node name and the UI label,
so it never contains ``/`` (ncu's NVTX filter reads ``/`` as nesting).

The topology is the same for the prefill and every decode step; only the step's token count
``nt`` (and the number of logit rows ``nr``) change. The step input ``rows`` selects which
positions' logits are computed (the seed's tail-row GetRows before the lm_head): the last one
when generating, all of them for :meth:`Model.logits`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from tracekit.runner.node import NR, NT, STEP_INPUTS, Node  # noqa: F401 (the graph's vocabulary)
from tracekit.runner.ops import OPS

if TYPE_CHECKING:
    from tracekit.model.config import ModelConfig


class Graph:
    """Nodes in execution order, looked up by name; the last node is the logits.

    ``fused``: the tensors the loader makes by concatenating the file's (:func:`fusion_plan`),
    fused tensor name -> its parts in row order; the nodes read the fused name."""

    def __init__(
        self,
        nodes: list[Node],
        config: ModelConfig | None = None,
        fused: dict[str, tuple[str, ...]] | None = None,
    ) -> None:
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self.config = config
        self.fused: dict[str, tuple[str, ...]] = dict(fused or {})
        self._by_name = {n.name: n for n in self.nodes}
        if len(self._by_name) != len(self.nodes):
            raise ValueError("graph has duplicate node names")
        self._consumers: dict[str, list[str]] = {}
        produced = set(STEP_INPUTS)
        for idx, n in enumerate(self.nodes):
            if n.id != idx:
                raise ValueError(f"node {n.name} has id {n.id}, expected its index {idx}")
            if "/" in n.name:
                raise ValueError(
                    f"node name {n.name!r} contains '/' (NVTX filters read it as nesting)"
                )
            for i in n.data_inputs:
                if i not in produced:
                    raise ValueError(f"node {n.name} reads {i!r}, which is not produced before it")
                self._consumers.setdefault(i, []).append(n.name)
            produced.add(n.name)
        #: For each node output (and step input), the index of the last node that reads it:
        #: the executor frees a value after that node (a long prefill keeps few activations).
        self.last_use: dict[str, int] = {}
        for n in self.nodes:
            for i in n.data_inputs:
                self.last_use[i] = n.id

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __getitem__(self, name: str) -> Node:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    @property
    def output(self) -> Node:
        return self.nodes[-1]

    def consumers(self, name: str) -> list[str]:
        """Names of the nodes that read ``name``'s output, in execution order."""
        return list(self._consumers.get(name, []))

    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def to_json(self) -> list[dict[str, Any]]:
        return [n.to_json() for n in self.nodes]


def overwritten_in_place(nodes: Sequence[Node]) -> list[bool]:
    """Per node: whether a later node of the step writes into its output buffer.

    A node with ``attrs["inplace"]`` writes its result into its first data input (``add_bias``:
    the Q/K/V bias is added into the matmul's output, on both backends), so that input's
    producer must be queued for statistics as a copy taken right after it ran: the batch reads
    its tensors after the step's last node. No other node writes a buffer it did not allocate
    (the KV cache, which attention writes, is not a node output), so every other output is
    queued by reference. Applied pairwise, the rule also covers chains of in-place nodes.

    A ``slice_cols`` output is a view of its input on a one-row step (runner/ops.py), so a write
    into it is one into the sliced node's output too: that node is marked as well (in every
    step: a copy where the slice copied costs a device copy, never a wrong statistic). A
    ``plane`` output is a view of its ``add_rms_norm`` input on every step: the same.
    """
    index = {n.name: n.id for n in nodes}
    out = [False] * len(nodes)
    for n in nodes:
        if n.attrs.get("inplace") and n.data_inputs and n.data_inputs[0] in index:
            target = nodes[index[n.data_inputs[0]]]
            out[target.id] = True
            while target.op in VIEW_OPS and target.data_inputs[0] in index:
                target = nodes[index[target.data_inputs[0]]]
                out[target.id] = True
    return out


#: Ops whose output is (or, for slice_cols on one row, may be) a view of their first input.
VIEW_OPS = ("slice_cols", "plane")


def fuse_add_norms(nodes: Sequence[Node]) -> list[Node]:
    """The nodes with each residual ``add`` whose output an ``rms_norm`` of whole rows reads
    (not a per-head Q/K norm) made one ``add_rms_norm`` node ``<add>_norm`` (output [2, nt, e]:
    the sum, then its norm), followed by the view ``<add>`` (op ``plane``, plane 0: the sum,
    read by the add's other readers, the next residual add) and, where the norm was, the view
    ``<norm>`` (plane 1). The views keep the unfused nodes' names, so a trace of this graph
    pairs with one of the unfused graph node by node; they never launch. One launch fewer per
    pair on every step (the 0.5B's decode: 47 of them, ~1.9 us each on the H200).
    """
    readers: dict[str, list[Node]] = {}
    for n in nodes:
        for i in n.data_inputs:
            readers.setdefault(i, []).append(n)
    fused: dict[str, Node] = {}  # add name -> the norm it is fused with
    for n in nodes:
        if n.op != "add":
            continue
        norm = next((r for r in readers.get(n.name, []) if r.op == "rms_norm"
                     and not r.attrs.get("heads") and r.data_inputs == (n.name,)), None)  # fmt: skip
        # a node writing the sum or the norm in place (attrs.inplace) would write into a plane
        # the other plane's readers share a buffer with: such a pair stays apart
        writes = [r for x in (n, norm) if x is not None for r in readers.get(x.name, [])
                  if r.attrs.get("inplace") and r.data_inputs[:1] == (x.name,)]  # fmt: skip
        if norm is not None and norm.shape == n.shape and not writes:
            fused[n.name] = norm
    if not fused:
        return list(nodes)
    views = {norm.name: add for add, norm in fused.items()}
    out: list[Node] = []

    def put(n: Node, **change: Any) -> None:
        out.append(dataclasses.replace(n, id=len(out), **change))

    for n in nodes:
        if n.name in fused:
            norm = fused[n.name]
            both = f"{n.name}_norm"
            put(n, name=both, op="add_rms_norm", family=OPS["add_rms_norm"].family,
                inputs=(*n.inputs, f"weight:{norm.weight}"), attrs={"eps": norm.attrs["eps"]},
                weight_type=norm.weight_type, shape=(2, *n.shape))  # fmt: skip
            put(n, op="plane", family=OPS["plane"].family, inputs=(both,), attrs={"plane": 0})
        elif n.name in views:
            put(n, op="plane", family=OPS["plane"].family, inputs=(f"{views[n.name]}_norm",),
                attrs={"plane": 1}, weight_type=None)  # fmt: skip
        else:
            put(n)
    return out


class _Builder:
    def __init__(self, weight_types: dict[str, str] | None) -> None:
        self.nodes: list[Node] = []
        self.weight_types = weight_types or {}

    def add(
        self,
        name: str,
        op: str,
        inputs: tuple[str, ...],
        shape: tuple[int | str, ...],
        layer: int | None = None,
        **attrs: Any,
    ) -> str:
        weight = next((i[7:] for i in inputs if i.startswith("weight:")), None)
        if op not in OPS:
            raise ValueError(f"node {name}: op {op!r} is not declared (runner/ops.py: {list(OPS)})")
        self.nodes.append(
            Node(
                id=len(self.nodes),
                name=name,
                op=op,
                family=OPS[op].family,
                layer=layer,
                inputs=inputs,
                attrs=attrs,
                weight_type=self.weight_types.get(weight) if weight else None,
                shape=shape,
            )
        )
        return name


#: The projections fused at load when their weights share one GGML type (same k by the
#: config's shapes): fused tensor stem -> the file's stems, in row order. phi3's files carry
#: ``attn_qkv`` (and ``ffn_up`` = [gate | up]) already; a fused ``attn_qkv`` made here has the
#: same rows, so the graph below is the one phi3 has.
FUSIBLE = {"attn_qkv": ("attn_q", "attn_k", "attn_v"), "ffn_gate_up": ("ffn_gate", "ffn_up")}


def fusion_plan(
    config: ModelConfig, weight_types: dict[str, str] | None, fuse: bool = True
) -> dict[str, tuple[str, ...]]:
    """The tensors to fuse: ``blk.N.attn_qkv.weight`` -> (``blk.N.attn_q.weight``, k, v), its
    bias ``blk.N.attn_qkv.bias`` likewise when the projections have biases, and
    ``blk.N.ffn_gate_up.weight`` -> (gate, up), for each layer whose parts share one type.

    One matmul launch over the concatenated rows replaces two or three (on decode: one mmvq
    that quantizes x once, instead of one per projection: docs/trace-format.md, "Fused
    projections"). Row blocks of a GGUF matrix are independent, so the concatenated bytes are
    the packed concatenated matrix. Parts of different types (a Q4_K_M file's Q6_K attn_v)
    stay separate nodes; without ``weight_types`` (a graph of a config alone) nothing is
    fused, nor with ``fuse`` False, nor where the file is fused already (phi3)."""
    c = config
    if not fuse or not weight_types:
        return {}
    plan: dict[str, tuple[str, ...]] = {}
    for il in range(c.n_layer):
        b = f"blk.{il}."
        for stem, parts in FUSIBLE.items():
            if stem == "attn_qkv" and c.fused_qkv or stem == "ffn_gate_up" and c.fused_gate_up:
                continue
            types = {weight_types.get(f"{b}{p}.weight") for p in parts}
            if len(types) != 1 or None in types:
                continue
            plan[f"{b}{stem}.weight"] = tuple(f"{b}{p}.weight" for p in parts)
            if stem == "attn_qkv" and c.qkv_bias:
                plan[f"{b}{stem}.bias"] = tuple(f"{b}{p}.bias" for p in parts)
    return plan


def fusion_note(plan: dict[str, tuple[str, ...]], n_layer: int) -> str | None:
    """One line for the trace's notes saying which projections were fused, in how many layers
    (None when none was)."""
    done = []
    for stem, parts in FUSIBLE.items():
        layers = [k for k in plan if k.endswith(f".{stem}.weight")]
        if layers:
            done.append(f"{' + '.join(parts)} -> {stem} in {len(layers)} of {n_layer} layers")
    if not done:
        return None
    return (
        "fused projections (one matmul over the concatenated rows, q/k/v sliced after, "
        "q and k roped by one node where no Q/K norm comes between, "
        "gate/up read by one glu node; --fuse off "
        f"keeps them apart): {'; '.join(done)}"
    )


def build_graph(
    config: ModelConfig,
    weight_types: dict[str, str] | None = None,
    fuse: bool = True,
    glu: bool = True,
    rope_qk: bool = True,
    add_norm: bool | None = None,
) -> Graph:
    """The forward graph of a model of one of the declared architectures (tracekit.model.archs).

    No branch here names an architecture: each feature (fused projections, biases, Q/K norms,
    post-norms, rope pairs and factors, per-layer windows and rope bases, soft-caps, embedding
    scale, activation, tied output) is a field of ``config``, which ``read_config`` fills from
    the architecture's declaration and the file.

    Args:
        config: the model's configuration.
        weight_types: tensor name -> GGML type name, recorded on the nodes that read them.
        fuse: fuse q/k/v and gate/up where their weights share a type (:func:`fusion_plan`).
        glu: where gate/up is one matmul (fused here, or phi3's file), follow it with one
            ``glu`` node (``blk.N.ffn_glu``: act(gate) * up, one launch) in place of two
            slices, the act and the mul; False keeps those four nodes (the graph before the
            glu op, which the tests compare it with bit for bit).
        rope_qk: where q/k/v is one matmul and no Q/K norm or part bias comes between it and
            the rope, rope q's and k's heads with one node (``blk.N.rope_qk`` over the slice
            ``blk.N.attn_qk``, the fused row's first q_dim + kv_dim columns), attention reading
            q and k as the slices ``blk.N.rope_q`` and ``blk.N.rope_k`` of its output;
            False keeps the slices attn_q, attn_k and two rope nodes (the graph before, which
            the tests compare it with bit for bit).
        add_norm: each residual add read by an rms_norm and that norm as one ``add_rms_norm``
            node and two views of its planes named as the two nodes were
            (:func:`fuse_add_norms`); False keeps the add and rms_norm nodes (the graph
            before, which the tests compare it with bit for bit); None (default): as ``fuse``,
            so ``--fuse off`` is the graph of no fusion at all.
    """
    c = config
    fused = fusion_plan(c, weight_types, fuse)
    types = dict(weight_types or {})
    for name, parts in fused.items():
        types[name] = types[parts[0]]
    g = _Builder(types)
    e, hd = c.n_embd, c.head_dim
    x = g.add("token_embd", "embed_rows", ("tokens", "weight:token_embd.weight"), (NT, e))
    if c.embed_scale != 1.0:
        x = g.add("token_embd.scale", "scale", (x,), (NT, e), scale=c.embed_scale)

    def matmul(
        name: str, inp: str, tensor: str, n: int, k: int, il: int, bias: str | None = None
    ) -> str:
        if bias is None:
            return g.add(name, "matmul", (inp, f"weight:{tensor}"), (NT, n), il, n=n, k=k)
        return g.add(name, "matmul", (inp, f"weight:{tensor}", f"weight:{bias}"), (NT, n), il,
                     n=n, k=k, bias=bias)  # fmt: skip

    def slice_cols(name: str, inp: str, start: int, width: int, il: int) -> str:
        # a fused output split into its parts: a view on decode (no launch), a copy otherwise
        return g.add(name, "slice_cols", (inp,), (NT, width), il, start=start, width=width)

    rope_inputs = (
        ("positions", "weight:rope_freqs.weight") if c.rope_freq_factors else ("positions",)
    )

    for il in range(c.n_layer):
        b = f"blk.{il}."
        h = g.add(b + "attn_norm", "rms_norm", (x, f"weight:{b}attn_norm.weight"), (NT, e), il,
                  eps=c.rms_eps)  # fmt: skip
        qkv = {}
        # a bias is the matmul node's (one launch on decode: mmvq's epilogue)
        qkv_fused = f"{b}attn_qkv.weight" in fused
        if c.fused_qkv or qkv_fused:
            bias = f"{b}attn_qkv.bias" if qkv_fused and c.qkv_bias else None
            qkv_out = matmul(b + "attn_qkv", h, f"{b}attn_qkv.weight", c.q_dim + 2 * c.kv_dim, e,
                             il, bias)  # fmt: skip
            starts = {"q": 0, "k": c.q_dim, "v": c.q_dim + c.kv_dim}
        rope_params = dict(base=c.layer_rope_base(il), neox=c.rope_neox,
                           freq_scale=c.layer_rope_freq_scale(il))  # fmt: skip
        # q and k roped by one node: the fused row's first q_dim + kv_dim columns are q's heads
        # then k's, and a layer's rope parameters are the same for both. Not where a Q/K norm
        # or a bias (the file's fused q/k/v) is applied to each part before its rope.
        one_rope = rope_qk and (qkv_fused or (c.fused_qkv and not c.qkv_bias)) and not c.qk_norm
        if one_rope:
            n_qk = c.n_head + c.n_head_kv
            qk = slice_cols(b + "attn_qk", qkv_out, 0, c.q_dim + c.kv_dim, il)
            qk = g.add(b + "rope_qk", "rope", (qk, *rope_inputs), (NT, n_qk, hd), il,
                       **rope_params, heads=n_qk)  # fmt: skip
            # the parts, by heads: views on decode (one row: contiguous), copies otherwise
            qkv["q"] = g.add(b + "rope_q", "slice_cols", (qk,), (NT, c.n_head, hd), il,
                             start=0, width=c.q_dim)  # fmt: skip
            qkv["k"] = g.add(b + "rope_k", "slice_cols", (qk,), (NT, c.n_head_kv, hd), il,
                             start=c.q_dim, width=c.kv_dim)  # fmt: skip
        for part, heads in (("q", c.n_head), ("k", c.n_head_kv), ("v", c.n_head_kv)):
            if one_rope and part != "v":
                continue
            if c.fused_qkv or qkv_fused:
                y = slice_cols(f"{b}attn_{part}", qkv_out, starts[part], heads * hd, il)
            else:
                bias = f"{b}attn_{part}.bias" if c.qkv_bias else None
                y = matmul(f"{b}attn_{part}", h, f"{b}attn_{part}.weight", heads * hd, e, il, bias)
            if c.qkv_bias and c.fused_qkv:  # the file's fused q/k/v, its biases apart
                y = g.add(f"{b}attn_{part}.bias", "add_bias",
                          (y, f"weight:{b}attn_{part}.bias"), (NT, heads * hd), il,
                          inplace=True)  # fmt: skip
            if c.qk_norm and part != "v":
                y = g.add(f"{b}attn_{part}_norm", "rms_norm",
                          (y, f"weight:{b}attn_{part}_norm.weight"), (NT, heads, hd), il,
                          eps=c.rms_eps, heads=heads)  # fmt: skip
            if part != "v":
                y = g.add(f"{b}rope_{part}", "rope", (y, *rope_inputs), (NT, heads, hd), il,
                          **rope_params, heads=heads)  # fmt: skip
            qkv[part] = y
        att = g.add(b + "attn", "attention", (qkv["q"], qkv["k"], qkv["v"]), (NT, c.q_dim), il,
                    n_head=c.n_head, n_head_kv=c.n_head_kv, head_dim=hd, scale=c.attn_scale,
                    window=c.layer_window(il), softcap=c.attn_softcap)  # fmt: skip
        y = matmul(b + "attn_output", att, f"{b}attn_output.weight", e, c.q_dim, il)
        if c.post_norms:
            y = g.add(b + "post_attention_norm", "rms_norm",
                      (y, f"weight:{b}post_attention_norm.weight"), (NT, e), il,
                      eps=c.rms_eps)  # fmt: skip
        x = g.add(b + "attn_residual", "add", (y, x), (NT, e), il)
        h = g.add(b + "ffn_norm", "rms_norm", (x, f"weight:{b}ffn_norm.weight"), (NT, e), il,
                  eps=c.rms_eps)  # fmt: skip
        # gate/up as one matmul: phi3's ffn_up rows are [gate | up]; a fused one made at load
        # (ffn_gate_up) has the same rows. A glu node reads its [nt, 2 n_ff] output whole.
        gu_stem = "ffn_up" if c.fused_gate_up else "ffn_gate_up"
        one_matmul = c.fused_gate_up or f"{b}{gu_stem}.weight" in fused
        if one_matmul:
            gu = matmul(b + gu_stem, h, f"{b}{gu_stem}.weight", 2 * c.n_ff, e, il)
        if one_matmul and glu:
            y = g.add(b + "ffn_glu", "glu", (gu,), (NT, c.n_ff), il, act=c.ffn_act)
        else:
            if one_matmul:  # the parts, named as the unfused matmuls were (phi3's ffn_up is taken)
                gate_up = (
                    ("ffn_gate_part", "ffn_up_part") if c.fused_gate_up else ("ffn_gate", "ffn_up")
                )
                gate = slice_cols(b + gate_up[0], gu, 0, c.n_ff, il)
                up = slice_cols(b + gate_up[1], gu, c.n_ff, c.n_ff, il)
            else:
                gate = matmul(b + "ffn_gate", h, f"{b}ffn_gate.weight", c.n_ff, e, il)
                up = matmul(b + "ffn_up", h, f"{b}ffn_up.weight", c.n_ff, e, il)
            act = g.add(b + "ffn_act", c.ffn_act, (gate,), (NT, c.n_ff), il)
            y = g.add(b + "ffn_mul", "mul", (act, up), (NT, c.n_ff), il)
        y = matmul(b + "ffn_down", y, f"{b}ffn_down.weight", e, c.n_ff, il)
        if c.post_norms:
            y = g.add(b + "post_ffw_norm", "rms_norm", (y, f"weight:{b}post_ffw_norm.weight"),
                      (NT, e), il, eps=c.rms_eps)  # fmt: skip
        x = g.add(b + "ffn_residual", "add", (y, x), (NT, e), il)

    x = g.add("output_rows", "gather_rows", (x, "rows"), (NR, e))
    x = g.add("output_norm", "rms_norm", (x, "weight:output_norm.weight"), (NR, e),
              eps=c.rms_eps)  # fmt: skip
    out_w = "token_embd.weight" if c.tied_output else "output.weight"
    x = g.add("output", "matmul", (x, f"weight:{out_w}"), (NR, c.n_vocab), n=c.n_vocab, k=e,
              tied=c.tied_output)  # fmt: skip
    if c.final_softcap:  # gemma2: the logits are cap * tanh(logits / cap)
        g.add("output_softcap", "softcap", (x,), (NR, c.n_vocab), cap=c.final_softcap)
    if add_norm is None:
        add_norm = fuse
    return Graph(fuse_add_norms(g.nodes) if add_norm else g.nodes, c, fused)
