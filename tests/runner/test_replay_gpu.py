"""Replayed decode steps (plan and CUDA graph) against the whole dispatch chain, on the GPU.

A replay runs the same kernels on the same buffers as the recorded step, so its logits must be
bit-identical to a session that runs every step through arm -> backend -> launcher (replay
"off"), at every position, through a sliding-window model too (gemma3's local layers read
n_past on the device to place the window).
"""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.kernels.backend import get_backend
from tracekit.model.demo import write_demo_model
from tracekit.model.synthetic import write_synthetic_model
from tracekit.runner.execute import GenerationError, Session, load_model

pytestmark = pytest.mark.gpu

PROMPT = [3, 17, 42, 7, 99]
STEPS = 12


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return load_model(write_demo_model(tmp_path_factory.mktemp("demo") / "demo.gguf"))


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    path = tmp_path_factory.mktemp("g") / "gemma3.gguf"
    write_synthetic_model(path, "gemma3")
    return load_model(path)


def _logits(model, replay: str, feed_forced: list[int] | None = None):
    """Prefill PROMPT, then STEPS decode steps feeding a fixed token sequence."""
    s = Session(model, get_backend("cupy"), n_ctx=64, replay=replay)
    out = [s.run_step(PROMPT)[-1]]
    feed = feed_forced or [(5 * k + 1) % model.config.n_vocab for k in range(STEPS)]
    for t in feed:
        out.append(s.run_step([t])[-1])
    return np.stack(out), s


@pytest.mark.parametrize("mode", ["plan", "graph"])
@pytest.mark.parametrize("which", ["demo", "gemma"])
def test_replay_is_bit_identical_to_the_dispatch_chain(mode, which, request):
    model = request.getfixturevalue(which)
    ref, _ = _logits(model, "off")
    got, s = _logits(model, mode)
    assert s._replay is not None
    if mode == "graph":
        assert s._replay.graph_launches == STEPS - 1  # the first decode step is the recording
    np.testing.assert_array_equal(got, ref)


def test_replay_with_a_node_hook_gives_each_node_its_output_and_records(demo):
    s = Session(demo, get_backend("cupy"), n_ctx=32, replay="plan")
    s.run_step(PROMPT)
    seen: list[tuple[str, tuple, list]] = []

    def hook(node, thunk):
        out = thunk()
        seen.append((node.name, tuple(out.shape), s.backend.take_records()))
        return out

    s.run_step([4], node_hook=hook)  # recorded
    first = list(seen)
    seen.clear()
    s.run_step([5], node_hook=hook)  # replayed
    assert [n for n, _, _ in seen] == [n for n, _, _ in first]
    assert [sh for _, sh, _ in seen] == [sh for _, sh, _ in first]
    for (name, _, r1), (_, _, r0) in zip(seen, first, strict=True):
        assert [r.kernel for r in r1] == [r.kernel for r in r0], name
    # attention reads one more K/V row at the next position: its record follows n_past
    att = [(r0, r1) for (n, _, r1), (_, _, r0) in zip(seen, first, strict=True) if "attn" == n[-4:]]
    assert att
    for r0, r1 in att:
        assert r1[-1].bytes_read > r0[-1].bytes_read


def test_replay_checks_ids_and_room_before_any_launch(demo):
    s = Session(demo, get_backend("cupy"), n_ctx=8, replay="plan")
    s.run_step(PROMPT)
    s.run_step([1])
    with pytest.raises(GenerationError, match="out of range"):
        s.run_step([demo.config.n_vocab])
    s.run_step([2])
    s.run_step([3])
    with pytest.raises(GenerationError, match="exceed the context"):
        s.run_step([4])


@pytest.mark.parametrize("mode", ["plan", "graph"])
@pytest.mark.parametrize("which", ["demo", "gemma"])
def test_prefill_replay_is_bit_identical_to_the_dispatch_chain(mode, which, request):
    """Prefills of one count at one position, other ids each time: the first is recorded, the
    later ones replayed; every one's logits (all rows) equal the dispatch chain's, and the
    decode steps after a replayed prefill too (its K/V rows landed in the cache)."""
    model = request.getfixturevalue(which)
    rng = np.random.default_rng(7)
    prompts = [[int(t) for t in rng.integers(0, model.config.n_vocab, 24)] for _ in range(3)]
    ref = Session(model, get_backend("cupy"), n_ctx=64, replay="off")
    got = Session(model, get_backend("cupy"), n_ctx=64, replay=mode, prefill_replay=True)
    for p in prompts:
        for s in (ref, got):
            s.reset()
        want = ref.run_step(p, all_logits=True)
        np.testing.assert_array_equal(got.run_step(p, all_logits=True), want)
        for t in (5, 9):
            np.testing.assert_array_equal(got.run_step([t]), ref.run_step([t]))
    assert list(got._prefills) == [(24, 0, 24)]  # one recording, replayed twice
    # another count or position is recorded anew, the oldest recording dropped past the limit
    for n in (23, 22):
        got.reset()
        ref.reset()
        np.testing.assert_array_equal(got.run_step(prompts[0][:n]), ref.run_step(prompts[0][:n]))
    assert list(got._prefills) == [(23, 0, 1), (22, 0, 1)]


def test_prefill_replay_needs_a_replay_mode(demo):
    with pytest.raises(GenerationError, match="prefill replay needs replay"):
        Session(demo, get_backend("cupy"), replay="off", prefill_replay=True)


def test_replay_mode_needs_cupy(demo):
    with pytest.raises(GenerationError, match="needs the cupy backend"):
        Session(demo, get_backend("numpy"), replay="plan")


@pytest.mark.parametrize("host_cap", [None, 1], ids=["deferred", "flush-each-step"])
@pytest.mark.parametrize("capture", ["timing", "full"])
def test_record_trace_with_cuda_graph(demo, tmp_path, capture, host_cap, monkeypatch):
    from tracekit.runner import record
    from tracekit.runner.record import CUDA_GRAPH_NOTE, record_trace
    from tracekit.trace.format import load_trace

    if host_cap is not None:  # one host buffer per pass kind: a flush after every step
        monkeypatch.setattr(record._HostBuffers, "CAP_BYTES", host_cap)

    kw = dict(tokens=PROMPT, steps=4, backend="cupy", capture=capture, progress=False)
    g = load_trace(record_trace(demo, output=tmp_path / "g.json", cuda_graph=True, **kw))
    p = load_trace(record_trace(demo, output=tmp_path / "p.json", **kw))
    assert g["run"]["cuda_graph"] is True and g["run"]["replay"] == "graph"
    assert CUDA_GRAPH_NOTE in g["run"]["notes"]
    assert p["run"]["replay"] == "plan"
    assert g["run"]["generated_tokens"] == p["run"]["generated_tokens"]
    for sg, sp in zip(g["steps"][1:], p["steps"][1:], strict=True):
        # the plane views (add_rms_norm's sum and norm) launch nothing: time 0
        times = [n["time_s"] for n in sg["nodes"] if n["launches"]]
        assert all(t > 0 for t in times)
        assert all(n["time_s"] == 0 for n in sg["nodes"] if not n["launches"])
        assert sg["gpu_s"] <= sg["timing_wall_s"]
        for ng, np_ in zip(sg["nodes"], sp["nodes"], strict=True):
            assert ng["shape"] == np_["shape"]
            assert [r["kernel"] for r in ng["launches"]] == [r["kernel"] for r in np_["launches"]]
            # bytes and flops too (attention's n_past); the times are each pass's own
            assert _untimed(ng["launches"]) == _untimed(np_["launches"])
            assert all(r["time_s"] > 0 for r in ng["launches"] + np_["launches"]), ng
            if capture == "full":  # the same kernels on the same outputs: the same statistics
                assert ng["stats"] == np_["stats"], ng
                assert sg["full_wall_s"] > 0
                assert (ng["full_time_s"] > 0) is bool(ng["launches"])
    # attention's bytes follow the position in graph steps too
    attn = next(n["id"] for n in g["nodes"] if n["name"] == "blk.0.attn")
    a1 = g["steps"][1]["nodes"][attn]["launches"][-1]["bytes_read"]
    a4 = g["steps"][4]["nodes"][attn]["launches"][-1]["bytes_read"]
    assert a4 > a1


def _untimed(launches: list[dict]) -> list[dict]:
    timing = ("time_s", "start_ns", "end_ns", "queued_ns")
    return [{k: v for k, v in r.items() if k not in timing} for r in launches]


def test_prepared_stats_follow_the_tensors_they_were_built_on():
    import cupy

    from tracekit.kernels.stats import StatsBatch

    rng = np.random.default_rng(0)
    xs = [cupy.asarray(rng.standard_normal((3, 40), dtype=np.float32)) for _ in range(3)]
    batch = StatsBatch()
    for i, x in enumerate(xs):
        batch.add(i, x, ("tokens", "features"))
    prep = batch.prepare()
    for round_ in range(2):
        if round_:
            xs[1][0, :5] = cupy.nan
            xs[2] *= 3
        prep.enqueue()
        got = prep.read().format()
        for i, x in enumerate(xs):
            fresh = StatsBatch()
            fresh.add(i, x, ("tokens", "features"))
            assert got[i] == fresh.finish()[i], (round_, i)
        assert got[1]["nan"] == (5 if round_ else 0)
