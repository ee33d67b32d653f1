"""scripts/matvec_peer.py: ncu's CSV read into each node's time, tracekit's and llama.cpp's."""

from __future__ import annotations

import pytest

from tests.scripts import load_script

HEADER = '"ID","Process ID","Kernel Name","gpu__time_duration.sum"\n"","","","ns"\n'


@pytest.fixture(scope="module")
def peer():
    return load_script("matvec_peer")


def _csv(tmp_path, rows, name="k.csv"):
    body = "".join(f'"{i}","7","{n}","{t:,}"\n' for i, (n, t) in enumerate(rows))
    path = tmp_path / name
    path.write_text("==PROF== Connected to process 7\n" + HEADER + body)
    return path


def test_ours_takes_each_types_second_call(tmp_path, peer) -> None:
    rows = [("mmvq_st_q4_0_n1", 30000), ("mmvq_st_q4_0_n1", 15000),
            ("quantize_q8_n1", 2000), ("mmvq_qx_q8_0_n1", 20000),
            ("quantize_q8_n1", 1500), ("mmvq_qx_q8_0_n1", 19000), ("copy_kernel", 5)]  # fmt: skip
    got = peer.ours_times(
        [{"type": "Q4_0", "kernels": ["mmvq_st_q4_0_n1"]},
         {"type": "Q8_0", "kernels": ["quantize_q8_n1", "mmvq_qx_q8_0_n1"]}],
        peer.ncu_rows(_csv(tmp_path, rows), peer.OURS),
    )  # fmt: skip
    assert got == pytest.approx({"Q4_0": 15e-6, "Q8_0": 20.5e-6})
    with pytest.raises(ValueError, match="expected"):
        peer.ours_times([{"type": "Q4_0", "kernels": ["mmvq_q4_0_n1"]}],
                        peer.ncu_rows(_csv(tmp_path, rows), peer.OURS))  # fmt: skip


def test_llama_pairs_quantize_with_its_matvec(tmp_path, peer) -> None:
    rows = [("void quantize_q8_1(const float *, void *, long)", 1000),
            ("void mul_mat_vec_q<(ggml_type)2, 1, false>(const void *)", 16000),
            ("void quantize_q8_1(const float *, void *, long)", 1100),
            ("void mul_mat_vec_q<(ggml_type)12, 1, false>(const void *)", 17000),
            ("void quantize_q8_1(const float *, void *, long)", 1200),
            ("void mul_mat_vec_q<(ggml_type)12, 1, false>(const void *)", 18000),
            # ncu 2026's demangling (H100, 14:38 UTC): the enum as a bare number
            ("quantize_q8_1(const float *, void *, long, long, long, long, int)", 3550),
            ("void mul_mat_vec_q<20, 1, 0, 0, 0>(const void *, const void *)", 19390)]  # fmt: skip
    got = peer.llama_times(peer.ncu_rows(_csv(tmp_path, rows), peer.LLAMA))
    # Q4_K's first node
    assert got == pytest.approx({"Q4_0": 17e-6, "Q4_K": 18.1e-6, "IQ4_NL": 22.94e-6})
    bad = _csv(tmp_path, [("void mul_mat_vec_f<float>(const float *)", 5)], "b.csv")
    with pytest.raises(ValueError, match="cannot tell the type"):
        peer.llama_times(peer.ncu_rows(bad, peer.LLAMA))
    (tmp_path / "e.csv").write_text("==ERROR== no kernels were profiled\n")
    with pytest.raises(ValueError, match="no ncu CSV header"):
        peer.ncu_rows(tmp_path / "e.csv", peer.LLAMA)
