"""Execution on the NumPy backend: prefill/decode agree (the KV cache), hooks, generation, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tracekit.kernels.backend import NumpyBackend
from tracekit.kernels.matmul import MatmulWeight
from tracekit.model.synthetic import SPECS, write_synthetic_model
from tracekit.runner.execute import GenerationError, Model, Sampling, Session, load_model
from tracekit.runner.ops import OpError

PROMPT = [5, 100, 200, 33, 7, 8, 9, 300, 12, 44]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Model]:
    d = tmp_path_factory.mktemp("exec")
    return {a: load_model(write_synthetic_model(d / f"{a}.gguf", a, seed=2)) for a in SPECS}


@pytest.mark.parametrize("arch", list(SPECS))
def test_decode_with_cache_matches_prefill(models: dict[str, Model], arch: str) -> None:
    """Row t of one prefill == the logits of token t fed alone after a cache of t tokens.

    Covers the KV cache writes and reads, positions, GQA, and (gemma3, window 4, 10 tokens)
    the sliding window over cached keys.
    """
    m = models[arch]
    full = m.logits(PROMPT, backend="numpy")
    assert full.shape == (len(PROMPT), m.config.n_vocab) and full.dtype == np.float32
    s = Session(m, NumpyBackend(), n_ctx=32)
    rows = [s.run_step(PROMPT[:3])[-1]]  # prefill 3 tokens, then decode one at a time
    for t in PROMPT[3:]:
        rows.append(s.run_step([t])[-1])
    np.testing.assert_allclose(np.stack(rows), full[2:], rtol=0, atol=2e-5)
    assert s.n_past == len(PROMPT)


def test_all_logits_vs_last_row(models: dict[str, Model]) -> None:
    m = models["qwen2"]
    be = NumpyBackend()
    a = Session(m, be, n_ctx=16).run_step(PROMPT, all_logits=True)
    b = Session(m, be, n_ctx=16).run_step(PROMPT)
    assert b.shape == (1, m.config.n_vocab)
    # not bit-equal: BLAS sums a 10-row and a 1-row product in different orders
    np.testing.assert_allclose(a[-1], b[0], rtol=0, atol=2e-5)


def test_node_hook_sees_every_node_in_order(models: dict[str, Model]) -> None:
    m = models["gemma3"]
    be = NumpyBackend()
    s = Session(m, be, n_ctx=16)
    seen, recs = [], {}

    def hook(node, thunk):
        assert not be.records  # the previous node's records were taken
        out = thunk()
        recs[node.name] = be.take_records()
        seen.append((node.name, tuple(out.shape)))
        return out

    s.run_step(PROMPT[:4], node_hook=hook)
    assert [n for n, _ in seen] == m.graph.names()
    assert dict(seen)["blk.0.rope_q"] == (4, 2, 256)
    assert dict(seen)["output"] == (1, m.config.n_vocab)
    assert [r.kernel for r in recs["blk.0.attn"]] == ["kv_store_f32", "attention_f32"]
    # every node launches but the views of add_rms_norm's planes, which never do
    ops = {n.name: n.op for n in m.graph}
    assert all((len(recs[n]) >= 1) == (ops[n] != "plane") for n in recs)
    assert sum(ops[n] == "plane" for n in recs) == 2 * (2 * m.config.n_layer - 1)
    s.run_step([1])  # without a hook the records are dropped node by node
    assert not be.records


def test_hook_result_is_what_flows(models: dict[str, Model]) -> None:
    """The executor uses what the hook returns (the runner may hand back the same object)."""
    m = models["llama"]
    calls = []

    def hook(node, thunk):
        calls.append(node.id)
        return thunk()

    a = Session(m, "numpy", n_ctx=16).run_step(PROMPT, node_hook=hook)
    b = Session(m, "numpy", n_ctx=16).run_step(PROMPT)
    np.testing.assert_array_equal(a, b)
    assert calls == list(range(len(m.graph)))


def test_generate_greedy(models: dict[str, Model]) -> None:
    m = models["qwen2"]
    s = Session(m, "numpy", n_ctx=32)
    steps, names = [], []

    def step_hook(name):
        names.append(name)
        from contextlib import nullcontext

        return nullcontext()

    out = s.generate(PROMPT, steps=5, step_hook=step_hook, on_step=steps.append)
    assert len(out) == 6 and names == ["prefill"] + [f"decode {k}" for k in range(1, 6)]
    assert [r.token for r in steps] == out
    assert all(r.token == int(np.argmax(r.logits)) for r in steps)
    assert steps[0].input_ids == PROMPT and steps[1].input_ids == [out[0]]
    assert [r.n_past for r in steps] == [0] + list(range(len(PROMPT), len(PROMPT) + 5))
    # the same tokens by re-running the whole sequence as one prefill (teacher forcing)
    full = m.logits(PROMPT + out[:-1], backend="numpy")
    assert list(full[len(PROMPT) - 1 :].argmax(axis=1)) == out


def test_generate_stops_at_eos(models: dict[str, Model], monkeypatch: pytest.MonkeyPatch) -> None:
    m = models["llama"]
    free = Session(m, "numpy", n_ctx=32).generate(PROMPT, steps=6)
    monkeypatch.setattr(Model, "eos_id", property(lambda self: free[2]))
    stopped = Session(m, "numpy", n_ctx=32).generate(PROMPT, steps=6)
    assert stopped == free[: free.index(free[2]) + 1]
    assert Session(m, "numpy", n_ctx=32).generate(PROMPT, steps=6, stop_at_eos=False) == free


def test_sampling_is_seeded(models: dict[str, Model]) -> None:
    m = models["gemma3"]

    def run(spec):
        return Session(m, "numpy", n_ctx=32).generate(PROMPT, steps=6, sampling=spec)

    a = run({"temperature": 1.5, "top_k": 20, "seed": 7})
    assert a == run({"temperature": 1.5, "top_k": 20, "seed": 7})
    assert run({"temperature": 1.0, "top_k": 1, "seed": 3}) == run("greedy")
    assert run({"temperature": 0.0, "seed": 1}) == run("greedy")
    draws = {tuple(run({"temperature": 5.0, "seed": s})) for s in range(4)}
    assert len(draws) > 1  # a hot temperature with different seeds does sample


def test_sampler_top_k_keeps_only_the_top() -> None:
    logits = np.array([0.0, 5.0, 4.9, -1.0, 4.8], dtype=np.float32)
    s = Sampling(temperature=100.0, top_k=2, seed=0)
    assert {s(logits) for _ in range(200)} == {1, 2}


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ({"temperature": -1}, "temperature -1 must be"),
        ({"top_k": 2.5}, "top_k 2.5 must be an integer"),
        ({"seed": "x"}, "seed 'x' must be an integer"),
        ({"temp": 1}, r"unknown sampling parameters \['temp'\]"),
        ("beam", "sampling 'beam' must be 'greedy'"),
    ],
)
def test_bad_sampling(models: dict[str, Model], spec, match: str) -> None:
    s = Session(models["llama"], "numpy", n_ctx=32)
    with pytest.raises(GenerationError, match=match):
        s.generate(PROMPT, steps=2, sampling=spec)


def _no_kernel_runs(s: Session):
    def hook(node, thunk):
        raise AssertionError(f"node {node.name} ran")

    return hook


@pytest.mark.parametrize(
    ("prompt", "steps", "match"),
    [
        ([1, 2, 304], 1, "token id 304 at position 2 is out of range for vocab size 304"),
        ([1, -1], 1, "token id -1 at position 1 is out of range for vocab size 304"),
        ([1, 2.0], 1, "token id 2.0 at position 1 is not an integer"),
        ([], 1, "the prompt is empty"),
        (list(range(20)), 0, "prompt of 20 tokens is longer than the context of 16"),
        (list(range(10)), 7, "10 tokens \\+ 7 decode steps need 17 positions, more than the"),
        ([1], -1, "steps -1 must be an integer >= 0"),
    ],
)
def test_errors_before_any_kernel(models: dict[str, Model], prompt, steps, match) -> None:
    s = Session(models["llama"], "numpy", n_ctx=16)
    with pytest.raises(GenerationError, match=match):
        s.generate(prompt, steps=steps, node_hook=_no_kernel_runs(s))
    assert s.n_past == 0 and not s.backend.records


def test_run_step_errors(models: dict[str, Model]) -> None:
    s = Session(models["llama"], "numpy", n_ctx=4)
    with pytest.raises(GenerationError, match="at least one token"):
        s.run_step([])
    s.run_step([1, 2, 3])
    with pytest.raises(
        GenerationError, match="2 tokens after 3 cached ones exceed the context of 4"
    ):
        s.run_step([4, 5], node_hook=_no_kernel_runs(s))
    with pytest.raises(GenerationError, match="token id 999 at position 3"):
        s.run_step([999])
    s.reset()
    assert s.n_past == 0
    with pytest.raises(GenerationError, match=r"KV cache length 9999 must be in \[1, 512\]"):
        Session(models["llama"], "numpy", n_ctx=9999)


def test_model_logits_errors(models: dict[str, Model]) -> None:
    with pytest.raises(GenerationError, match="token id 400 at position 0"):
        models["qwen2"].logits([400], backend="numpy")
    with pytest.raises(GenerationError, match="at least one token"):
        models["qwen2"].logits([], backend="numpy")
    with pytest.raises(GenerationError, match="token id 1.5 at position 1 is not an integer"):
        models["qwen2"].logits([1, 1.5], backend="numpy")


def test_op_error_names_the_node(models: dict[str, Model], monkeypatch: pytest.MonkeyPatch) -> None:
    m = models["qwen2"]
    be = NumpyBackend()
    w = m.weights(be)
    good = w.matmul["blk.1.ffn_up.weight"]
    bad = MatmulWeight(None, good.quant, (10, 7), np.zeros((10, 7), np.float32), "f32")
    monkeypatch.setitem(w.matmul, "blk.1.ffn_up.weight", bad)
    with pytest.raises(OpError, match=r"node blk\.1\.ffn_up \(matmul\): .*k mismatch"):
        Session(m, be, n_ctx=8).run_step([1, 2])


def test_default_cache_length(models: dict[str, Model]) -> None:
    s = Session(models["qwen2"], "numpy")
    assert s.n_ctx == 512 and s.k_cache[0].shape == (512, 2, 64)
    assert len(s.k_cache) == len(s.v_cache) == 2


def test_logits_reuses_the_backend_and_weights(models: dict[str, Model]) -> None:
    m = models["llama"]
    m.logits([1, 2], backend="numpy")
    be = m.backend("numpy")
    w = m.weights(be)
    m.logits([3], backend="numpy")
    assert m.backend("numpy") is be and m.weights(be) is w


def test_tokenize_round_trip(models: dict[str, Model]) -> None:
    m = models["llama"]
    ids = m.tokenize("The kernel reads one block")
    assert m.detokenize(ids) == "The kernel reads one block"
    assert all(0 <= i < m.config.n_vocab for i in ids)


def test_path_is_kept(models: dict[str, Model]) -> None:
    assert isinstance(models["llama"].path, Path)


def test_pdl_needs_graph_replay_on_the_gpu(models: dict[str, Model]) -> None:
    """Programmatic dependent launches are a CUDA-graph decode feature (Session(pdl=True)):
    asked of the NumPy backend it is refused by name, before anything runs."""
    with pytest.raises(GenerationError, match="pdl.*needs replay 'graph' on the cupy backend, "
                       "not replay 'off' on numpy"):  # fmt: skip
        Session(models["llama"], "numpy", n_ctx=16, pdl=True)
    assert Session(models["llama"], "numpy", n_ctx=16, pdl=False).pdl is False
    # the default (None) takes them where they can be made: never on numpy, never off graph
    assert Session(models["llama"], "numpy", n_ctx=16).pdl is False
