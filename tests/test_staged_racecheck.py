"""scripts/staged_racecheck.py (what gpu_check_s6.sh's stracecheck runs under compute-sanitizer):
on the GPU, without the sanitizer, its launches agree with mmvq bit for bit and it says so."""

from __future__ import annotations

import pytest

from tests.scripts import run_script


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [[], ["--rpw", "2"]], ids=["declared_blocks", "two_rows_a_warp"])
def test_the_script_runs_on_the_gpu(tmp_path, rows: list[str]) -> None:
    pytest.importorskip("cupy")
    got = run_script("staged_racecheck", ["--types", "Q4_0,Q6_K", *rows], tmp_path)
    assert got.returncode == 0, got.stderr[-3000:]
    lines = got.stdout.splitlines()
    assert lines[-1] == "all ok"
    # 2 types x 2 shapes x 2 token counts x (mmvq_st, mmvq_st_qx)
    assert sum("same bits" in line for line in lines) == 16
    assert sum("mmvq_st_qx_" in line for line in lines) == 8
