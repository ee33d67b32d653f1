"""Run every CUDA kernel once at its edge sizes, then a demo forward (prefill + decode).

Meant to run under compute-sanitizer (scripts/sanitizer_check.sh): small sizes, every launch
path, every quant type. Exits non-zero if any result disagrees with the NumPy backend.
"""

from __future__ import annotations

import sys

import numpy as np

from tracekit.kernels import elementwise as ew
from tracekit.kernels.backend import CupyBackend, NumpyBackend
from tracekit.quants import QUANT_TABLE, quant_type


def random_raw(qt, shape, rng):
    raw = rng.integers(0, 256, qt.nbytes(shape), dtype=np.uint8)
    if qt.is_quantized:  # finite f16 scales: overwrite each block's leading halves with 0.01..1
        blocks = raw.reshape(-1, qt.type_size)
        scales = rng.uniform(0.01, 1.0, (blocks.shape[0], 2)).astype(np.float16).view(np.uint8)
        blocks[:, :4] = scales.reshape(-1, 4)
    elif qt.name == "F32":
        raw = rng.standard_normal(int(np.prod(shape)), dtype=np.float32).view(np.uint8)
    elif qt.name == "F16":
        raw = rng.standard_normal(int(np.prod(shape))).astype(np.float16).view(np.uint8)
    return raw


def main() -> int:
    rng = np.random.default_rng(0)
    gpu, cpu = CupyBackend(), NumpyBackend()
    bad = 0

    def check(name, a, b, tol=0.0):
        nonlocal bad
        a, b = gpu.to_host(a).astype(np.float64), np.asarray(b).astype(np.float64)
        ok = a.shape == b.shape and np.allclose(a, b, rtol=tol, atol=tol, equal_nan=True)
        if not ok:
            bad += 1
        print(f"{'ok ' if ok else 'BAD'} {name} {a.shape}")

    for qt in QUANT_TABLE.values():
        for rows in (1, 3):
            shape = (rows, qt.block_size * 2 if qt.is_quantized else 33)
            raw = random_raw(qt, shape, rng)
            check(
                f"dequant {qt.name}",
                gpu.dequantize_f16(gpu.asarray(raw), qt, shape),
                cpu.dequantize_f16(raw, qt, shape),
            )
            ids = np.array([rows - 1, 0, rows - 1], dtype=np.int32)
            check(
                f"embed {qt.name}",
                gpu.embed_rows(gpu.asarray(raw), qt, shape, gpu.asarray(ids)),
                cpu.embed_rows(raw, qt, shape, ids),
            )
            if qt.is_quantized:  # a table 1 byte off: the byte-wise decoders (word-wise above)
                odd = gpu.asarray(np.concatenate([np.zeros(1, np.uint8), raw]))[1:]
                check(
                    f"embed {qt.name} at +1",
                    gpu.embed_rows(odd, qt, shape, gpu.asarray(ids)),
                    cpu.embed_rows(raw, qt, shape, ids),
                )
    for n in (1, 7, 33, 1001):
        x = rng.standard_normal((3, n), dtype=np.float32)
        y = rng.standard_normal((3, n), dtype=np.float32)
        gx, gy = gpu.asarray(x), gpu.asarray(y)
        check(f"add n={n}", gpu.add_f32(gx, gy), cpu.add_f32(x, y))
        check(f"mul n={n}", gpu.mul_f32(gx, gy), cpu.mul_f32(x, y))
        check(f"silu n={n}", gpu.silu_f32(gx), cpu.silu_f32(x), 1e-5)
        check(f"gelu n={n}", gpu.gelu_tanh_f32(gx), cpu.gelu_tanh_f32(x), 1e-5)
        check(f"scale n={n}", gpu.scale_f32(gx, 0.5), cpu.scale_f32(x, 0.5))
        check(f"softcap n={n}", gpu.softcap_f32(gx, 0.7), cpu.softcap_f32(x, 0.7), 1e-5)
        w = max(1, n // 3)
        check(
            f"slice_cols n={n}", gpu.slice_cols_f32(gx, n - w, w), cpu.slice_cols_f32(x, n - w, w)
        )
        check(f"convert n={n}", gpu.convert_f32_f16(gx), cpu.convert_f32_f16(x))
        check(f"bits n={n}", gpu.f32_bits_to_i32(gx), cpu.f32_bits_to_i32(x))
        b = rng.standard_normal(n, dtype=np.float32)
        check(
            f"add_bias n={n}",
            gpu.add_bias_f32(gpu.asarray(x), gpu.asarray(b)),
            cpu.add_bias_f32(x.copy(), b),
        )
        check(
            f"rms_norm n={n}",
            gpu.rms_norm_f32(gx, gpu.asarray(b), 1e-6),
            cpu.rms_norm_f32(x, b, 1e-6),
            1e-4,
        )
        check(f"softmax n={n}", gpu.softmax_f32(gx), cpu.softmax_f32(x), 1e-5)
        check(f"argmax n={n}", gpu.argmax_f32(gx), cpu.argmax_f32(x))
        check(
            f"gather n={n}",
            gpu.gather_rows_f32(gx, gpu.asarray(np.array([2, 0], np.int32))),
            cpu.gather_rows_f32(x, np.array([2, 0], np.int32)),
        )
    for n in (1, 7, 33, 1001):  # the bench's store floor
        z = gpu.asarray(np.full(n, np.nan, np.float32))
        ew.launch_fill_f32(z, 1.5)
        check(f"fill n={n}", z, np.full(n, 1.5, np.float32))
    for hd, nt in ((64, 1), (128, 5)):
        q = rng.standard_normal((nt, 4, hd), dtype=np.float32)
        pos = np.arange(3, 3 + nt, dtype=np.int32)
        for neox in (False, True):
            check(
                f"rope hd={hd} neox={neox}",
                gpu.rope_f32(gpu.asarray(q), gpu.asarray(pos), 1e4, neox),
                cpu.rope_f32(q, pos, 1e4, neox),
                1e-4,
            )
            ff = rng.uniform(1.0, 8.0, hd // 2).astype(np.float32)
            check(
                f"rope hd={hd} neox={neox} freq_factors",
                gpu.rope_f32(gpu.asarray(q), gpu.asarray(pos), 5e5, neox, 1.0, gpu.asarray(ff)),
                cpu.rope_f32(q, pos, 5e5, neox, 1.0, ff),
                1e-4,
            )
        kc, vc = np.zeros((16, 2, hd), np.float32), np.zeros((16, 2, hd), np.float32)
        k = rng.standard_normal((nt, 2, hd), dtype=np.float32)
        gk, gv = gpu.asarray(kc), gpu.asarray(vc)
        gpu.kv_store_f32(gk, gpu.asarray(k), gv, gpu.asarray(k * 2), 3)
        cpu.kv_store_f32(kc, k, vc, k * 2, 3)
        for window in (0, 2):
            check(
                f"attention hd={hd} nt={nt} window={window}",
                gpu.attention_f32(gpu.asarray(q), gk, gv, 3, hd**-0.5, window),
                cpu.attention_f32(q, kc, vc, 3, hd**-0.5, window),
                1e-4,
            )
    w = rng.standard_normal((48, 64), dtype=np.float32)
    x = rng.standard_normal((5, 64), dtype=np.float32)
    f16 = quant_type("F16")
    w16_raw = w.astype(np.float16).view(np.uint8).reshape(-1)
    for mode in ("f16", "quant"):  # cached GEMM; the matvec kernel (5 tokens)
        be = CupyBackend(mode, "on" if mode == "f16" else "off")
        check(
            f"matmul {mode}",
            be.matmul(gpu.asarray(x), be.matmul_weight(gpu.asarray(w16_raw), f16, (48, 64), True)),
            x @ w.astype(np.float16).astype(np.float32).T,
            2e-2,
        )

    # A whole demo forward: prefill + 2 decode steps.
    from tracekit.model.demo import demo_model_path
    from tracekit.runner.execute import Session, load_model

    model = load_model(demo_model_path())
    s = Session(model, gpu)  # decode 6 recorded through the dispatch chain, 7 replayed (plan)
    logits = s.run_step([1, 2, 3, 4, 5])
    for t in (6, 7):
        logits = s.run_step([t])
    gpu.synchronize()
    print("demo forward ok", gpu.to_host(logits).shape)

    # The CUDA-graph passes: plain replay, then a traced run whose decode passes are timed and
    # full graphs (timestamp kernels, in-place copies and the statistics batch inside).
    from tracekit.runner.record import record_trace

    g = Session(model, gpu, replay="graph")  # the same steps as the plan session above
    g.run_step([1, 2, 3, 4, 5])
    g.run_step([6])
    got = g.run_step([7])
    bad += int(not np.array_equal(got, gpu.to_host(logits)))
    record_trace(model, tokens=[1, 2, 3, 4, 5], steps=3, backend=gpu, capture="full",
                 cuda_graph=True, output="/tmp/sanitize-graph.json", progress=False,
                 ceilings={"copy_bandwidth_Bps": 4e12, "launch_overhead_s": 2e-6,
                           "peak_flops": 7e14})  # fmt: skip
    print("graph replay and graph trace ok")
    print(f"{'FAILED' if bad else 'all ok'}: {bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
