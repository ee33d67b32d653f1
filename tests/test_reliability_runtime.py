"""Reliability at run time (issue 6): bad ids and shapes fail before any kernel, runs survive
SIGKILL and SIGINT.

Bad input: every case goes through the real ``record-trace`` entry point (in-process, for speed)
and must end in ONE ``error: ...`` line and exit code 2, with no output file, while a spy
backend proves that no kernel ran: every backend is a :class:`SpyBackend` whose kernel methods
and launch-record sink log each call, and the statistics and weight-upload paths are wrapped
too. The models whose tensor shapes disagree with their metadata are synthetic llama files
written by ``gguf.GGUFWriter`` (``tracekit.model.synthetic``) and then edited in place through
``gguf.GGUFReader(mode="r+")``, one field or one tensor's dims at a time.

Interrupted runs: a small slice of ``scripts/kill_test.py`` (the full campaign is that script).
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import pytest

import tracekit.kernels.backend as backend_mod
from tests.scripts import load_script
from tracekit.cli import main, record_trace_main
from tracekit.kernels.backend import Backend, NumpyBackend

REPO = Path(__file__).resolve().parents[1]
DEMO_VOCAB = 512  # the demo model's vocabulary and context (tracekit.model.demo)
DEMO_CTX = 512


# -- the spy ---------------------------------------------------------------------------------
#: Backend methods that launch a kernel (each family's launcher or NumPy reference).
KERNEL_METHODS = tuple(
    name
    for name, fn in vars(Backend).items()
    if callable(fn)
    and not name.startswith("_")
    and name not in ("take_records", "asarray", "to_host", "synchronize", "device_name", "now")
)


class SpyBackend(NumpyBackend):
    """A NumPy backend that logs every kernel call and every launch record into ``calls``."""

    calls: list[str] = []  # shared by every instance: the CLI makes its own

    def _emit(self, result: Any) -> Any:
        SpyBackend.calls.append("_emit")
        return super()._emit(result)


def _spied(name: str) -> Callable[..., Any]:
    base = getattr(NumpyBackend, name)

    def method(self: SpyBackend, *a: Any, **k: Any) -> Any:
        SpyBackend.calls.append(name)
        return base(self, *a, **k)

    return method


for _name in KERNEL_METHODS:
    setattr(SpyBackend, _name, _spied(_name))


@pytest.fixture
def spy_backend(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every backend the CLI asks for is a SpyBackend; returns the log of its kernel calls."""
    SpyBackend.calls = []
    monkeypatch.setattr(backend_mod, "get_backend", lambda name="auto", *modes: SpyBackend())
    return SpyBackend.calls


@pytest.fixture
def spy(spy_backend: list[str], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``spy_backend``, and the two other ways to compute on tensors logged too (and refused):
    the statistics of a node's output and the upload (dequantization) of the weights."""
    import tracekit.runner.execute as execute_mod
    import tracekit.runner.record as record_mod

    def stats(*a: Any, **k: Any) -> Any:
        spy_backend.append("tensor_stats")
        raise AssertionError("tensor_stats ran")

    def prepare(self: Any, be: Any) -> Any:
        spy_backend.append("weights upload")
        raise AssertionError("weights were uploaded")

    monkeypatch.setattr(record_mod, "tensor_stats", stats)
    monkeypatch.setattr(execute_mod.Model, "_prepare", prepare)
    return spy_backend


def test_spy_sees_a_real_run(spy_backend: list[str], tmp_path: Path) -> None:
    """Positive control: the spy logs the kernels of a run that gets past the checks."""
    from tracekit.runner.record import record_trace

    ceil = {"copy_bandwidth_Bps": 1e10, "launch_overhead_s": 1e-6, "peak_flops": 1e11}
    path = record_trace(
        None, tokens=[1, 2], steps=0, backend="numpy", output=tmp_path / "t.json",
        progress=False, nvtx=False, ceilings=ceil, warmup=False,
    )  # fmt: skip
    assert path.is_file()
    assert {"embed_rows", "matmul_weight", "matmul", "rms_norm_f32", "_emit"} <= set(spy_backend)


def _fails_before_kernels(
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    spy: list[str],
    out: Path,
    *needles: str,
    entry: Callable[[list[str]], int] = record_trace_main,
) -> str:
    rc = entry([*argv, "--backend", "numpy", "--no-progress", "-o", str(out)])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], lines[0]
    assert spy == [], f"kernels ran before the error: {spy[:5]}"
    assert not out.exists()
    return lines[0]


# -- token ids -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("tokens", "needle"),
    [
        ("-1", "token id -1 at position 0 is out of range for vocab size 512"),
        ("5,-3", "token id -3 at position 1 is out of range"),
        ("1, 2, 512", f"token id 512 at position 2 is out of range for vocab size {DEMO_VOCAB}"),
        ("511 512", "token id 512 at position 1"),
        ("1,2,99999999999999999999999999", "token id 99999999999999999999999999 at position 2"),
        (str(2**63), f"token id {2**63} at position 0"),
        ("1,two,3", "--tokens: 'two' at position 1 is not an integer id"),
        ("1.5", "'1.5' at position 0 is not an integer id"),
        ("0x10", "'0x10' at position 0 is not an integer id"),
        ("1e3", "'1e3' at position 0 is not an integer id"),
        ("nan", "'nan' at position 0 is not an integer id"),
        # Python's int() reads these as 10, 1, 3 and 5: refused, not run as a prompt nobody typed
        ("1_0", "--tokens: '1_0' at position 0 is not an integer id (digits 0-9 only)"),
        ("3,1_000", "'1_000' at position 1 is not an integer id"),
        ("\uff11", "'\uff11' at position 0 is not an integer id"),  # fullwidth digit one
        ("2 \u0663", "'\u0663' at position 1 is not an integer id"),  # Arabic-Indic three
        ("\U0001d7d3", "'\U0001d7d3' at position 0 is not an integer id"),  # bold digit 5
        ("--1", "'--1' at position 0 is not an integer id"),
        ("", "--tokens is empty"),
        (" , ,", "--tokens is empty"),
    ],
)
def test_bad_token_ids(
    tokens: str, needle: str, spy: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fails_before_kernels([f"--tokens={tokens}"], capsys, spy, tmp_path / "t.json", needle)


def test_bad_token_ids_as_a_separate_argument(
    spy: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--tokens 512` (not `--tokens=512`), the way people type it
    _fails_before_kernels(["--tokens", "512"], capsys, spy, tmp_path / "t.json", "token id 512")
    _fails_before_kernels(["--tokens", "-7"], capsys, spy, tmp_path / "t.json", "token id -7")


def test_negative_id_list_as_a_separate_argument(
    spy: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fails_before_kernels(["--tokens", "-1,2"], capsys, spy, tmp_path / "t.json", "token id -1")


# -- prompt and steps against the context ----------------------------------------------------
def test_prompt_longer_than_the_context(
    spy: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = ",".join(str(i % 500) for i in range(DEMO_CTX + 1))
    _fails_before_kernels(
        [f"--tokens={ids}", "--steps", "0"], capsys, spy, tmp_path / "t.json",
        f"the prompt of {DEMO_CTX + 1} tokens + 0 decode steps need {DEMO_CTX + 1} positions, "
        f"more than the model's context of {DEMO_CTX}",
    )  # fmt: skip


def test_prompt_text_longer_than_the_context(
    spy: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _fails_before_kernels(
        ["--prompt", "the kernel reads one block " * 200, "--steps", "1"],
        capsys, spy, tmp_path / "t.json", f"more than the model's context of {DEMO_CTX}",
    )  # fmt: skip
    assert "the prompt of " in line


@pytest.mark.parametrize(
    ("steps", "needle"),
    [
        (str(DEMO_CTX), f"the prompt of 1 tokens + {DEMO_CTX} decode steps need {DEMO_CTX + 1}"),
        ("1000000000000", "more than the model's context of 512"),
        ("-1", "--steps -1 must be >= 0"),
    ],
)
def test_steps_past_the_context(
    steps: str, needle: str, spy: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fails_before_kernels(
        ["--tokens", "1", f"--steps={steps}"], capsys, spy, tmp_path / "t.json", needle
    )


def test_exactly_the_context_passes_the_checks(
    spy: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The boundary: prompt + steps == n_ctx is accepted (it reaches the weight upload, which
    the spy refuses), one more position is refused before it."""
    ids = ",".join(str(i % 500) for i in range(DEMO_CTX - 3))
    rc = record_trace_main([f"--tokens={ids}", "--steps", "3", "--backend", "numpy",
                            "--no-progress", "-o", str(tmp_path / "t.json")])  # fmt: skip
    assert rc == 2 and "weights were uploaded" in capsys.readouterr().err
    assert spy and spy[0] == "weights upload"
    spy.clear()
    _fails_before_kernels([f"--tokens={ids}", "--steps", "4"], capsys, spy, tmp_path / "t.json",
                          f"need {DEMO_CTX + 1} positions")  # fmt: skip


# -- models whose tensor shapes disagree with their metadata --------------------------------
@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic llama (3 layers, n_embd 128, n_ff 256, 4 heads / 2 KV heads of 32, vocab
    304), written by GGUFWriter."""
    from tracekit.model.synthetic import write_synthetic_model

    return write_synthetic_model(tmp_path_factory.mktemp("m") / "llama.gguf", "llama")


def edited(src: Path, dst: Path, meta: dict[str, int] | None = None,
           dims: dict[str, list[int]] | None = None) -> Path:  # fmt: skip
    """A copy of ``src`` with metadata integers overwritten in place through gguf's own reader
    (mode r+) and tensors cut to new dims (ggml order), written again by GGUFWriter so that the
    data layout stays what ggml requires (each tensor at the aligned end of the one before): the
    file stays well-formed GGUF."""
    if dims:
        r = gguf.GGUFReader(src)
        w = gguf.GGUFWriter(dst, r.fields["general.architecture"].contents())
        for key, f in r.fields.items():
            if key.startswith("GGUF.") or key == "general.architecture":
                continue
            sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
            w.add_key_value(key, f.contents(), f.types[0], sub_type=sub)
        for t in r.tensors:
            shape = list(reversed(dims.get(t.name, t.shape.tolist())))  # NumPy order
            block, tsize = gguf.GGML_QUANT_SIZES[t.tensor_type]
            byte_shape = [*shape[:-1], shape[-1] // block * tsize]
            raw = t.data.reshape(-1).view("uint8")[: math.prod(byte_shape)]
            w.add_tensor(t.name, raw.reshape(byte_shape), raw_dtype=t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        del r
    else:
        shutil.copyfile(src, dst)
    r = gguf.GGUFReader(dst, "r+")
    for key, value in (meta or {}).items():
        f = r.fields[key]
        f.parts[f.data[0]][0] = value
    r.data.flush()
    del r
    return dst


SHAPE_CASES = {
    "n_ff": (
        {"llama.feed_forward_length": 320}, None,
        ["tensor blk.0.ffn_gate.weight has shape [256, 128], expected [320, 128] from the metadata",
         "tensor blk.2.ffn_down.weight has shape [128, 256], expected [128, 320]"],
    ),
    "n_head_kv": (
        {"llama.attention.head_count_kv": 1}, None,
        ["tensor blk.0.attn_k.weight has shape [64, 128], expected [32, 128] from the metadata"],
    ),
    "n_embd": (
        {"llama.embedding_length": 256, "llama.attention.head_count": 8}, None,
        ["tensor token_embd.weight has shape [304, 128], expected [304, 256] from the metadata"],
    ),
    "n_embd_rope": (
        {"llama.embedding_length": 96}, None,
        ["rope.dimension_count 32 differs from head_dim 24"],
    ),
    "n_layer": (
        {"llama.block_count": 4}, None,
        ["metadata llama.block_count = 4 but the file has tensors for 3 blocks"],
    ),
    "tensor_dims": (
        None, {"blk.1.ffn_up.weight": [128, 128]},
        ["tensor blk.1.ffn_up.weight has shape [128, 128], expected [256, 128] from the metadata"],
    ),
    "vocab_rows": (
        None, {"token_embd.weight": [128, 200]},
        ["the tokenizer has 304 tokens but token_embd.weight has only 200 rows"],
    ),
    "n_ctx_zero": (
        {"llama.context_length": 0}, None, ["metadata llama.context_length = 0 must be >= 1"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(SHAPE_CASES))
def test_model_shapes_disagree_with_metadata(
    case: str, llama: Path, spy: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    meta, dims, needles = SHAPE_CASES[case]
    model = edited(llama, tmp_path / f"{case}.gguf", meta, dims)
    # all problems on one line (ModelError lists every one; n_embd has 31)
    _fails_before_kernels(
        [str(model), "--tokens", "1,2"], capsys, spy, tmp_path / "t.json", f"{case}.gguf: ",
        *needles,
    )  # fmt: skip
    # `tracekit info` refuses it the same way
    assert main(["info", str(model)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and all(n in err[0] for n in needles), err


def test_the_unedited_model_passes(
    llama: Path, spy: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Control for the cases above: the same model, unedited, gets past every check."""
    model = edited(llama, tmp_path / "same.gguf")
    assert record_trace_main([str(model), "--tokens", "1,2", "--backend", "numpy",
                              "--no-progress", "-o", str(tmp_path / "t.json")]) == 2  # fmt: skip
    assert "weights were uploaded" in capsys.readouterr().err


# -- interrupted runs: a slice of scripts/kill_test.py ----------------------------------------
@pytest.mark.slow
def test_kill_and_interrupt_slice(tmp_path: Path) -> None:
    """5 SIGKILLs at seeded random moments, 2 timed into the final write, 3 SIGINTs, 2
    SIGTERMs, and a SIGINT and a SIGTERM timed into the final write: never a partial file at
    the output path or a temp file after a SIGINT/SIGTERM, a pre-seeded trace stays valid, a
    SIGINT/SIGTERM saves a valid trace marked incomplete (or says it was interrupted and leaves
    no file), one inside the final write lets it finish."""
    kt = load_script("kill_test")
    report = kt.campaign(
        tmp_path, kills=5, write_kills=2, sigints=3, seed=1, steps=6, jobs=1, log=None,
        sigterms=2, write_sigints=1, write_sigterms=1,
    )  # fmt: skip
    assert report["failures"] == [], json.dumps(report["failures"], indent=1)  # every field
    assert report["runs"] == 14
    assert sum(report["outcomes"]["sigint"].values()) == 3
    assert sum(report["outcomes"]["sigterm"].values()) == 2


# -- Ctrl-C before the command's own handler: reproductions of the kill_test findings --------
@pytest.mark.parametrize("entry", ["main", "record_trace_main"])
def test_ctrl_c_while_parsing_arguments(
    entry: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    import tracekit.cli as cli

    def interrupted(self: Any, *a: Any, **k: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", interrupted)
    argv = ["record-trace", "--tokens", "1"] if entry == "main" else ["--tokens", "1"]
    try:
        rc = getattr(cli, entry)(argv)
    except KeyboardInterrupt:  # escaping, it would stop pytest itself
        pytest.fail(f"KeyboardInterrupt escaped {entry}()")
    assert rc == 130
    assert capsys.readouterr().err.strip() == "error: interrupted"


def test_ctrl_c_while_python_m_tracekit_imports_the_cli() -> None:
    import subprocess

    code = (
        "import builtins, runpy, sys\n"
        "real = builtins.__import__\n"
        "def imp(name, *a, **k):\n"
        "    if name == 'tracekit.cli':\n"
        "        raise KeyboardInterrupt\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = imp\n"
        "sys.argv = ['tracekit', 'record-trace']\n"
        "runpy.run_module('tracekit', run_name='__main__')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in r.stderr, r.stderr[-500:]
    assert r.returncode == 130 and r.stderr.strip() == "error: interrupted"


# -- Ctrl-C that lands in a finalizer -----------------------------------------------------------
# Python runs the SIGINT handler wherever the main thread is; inside a finalizer (tqdm's __del__
# as the recording returns, anything the garbage collector finalizes mid-run) the
# KeyboardInterrupt is printed as "Exception ignored" and lost, and the run went on to exit 0.
# Each case runs the real record-trace entry point in a child, whose own SIGINT is sent from the
# finalizer at the moment named.
_FINALIZER_SIGINT = (
    "import os, signal, sys\n"
    "def ctrl_c(self):\n"
    "    os.kill(os.getpid(), signal.SIGINT)\n"
    "    for _ in range(1000):  # the handler runs here, inside the finalizer\n"
    "        pass\n"
)


def _record_in_child(setup: str, out: Path, steps: int) -> tuple[int, list[str]]:
    import subprocess

    code = (
        _FINALIZER_SIGINT + setup + "from tracekit.cli import record_trace_main\n"
        f"sys.exit(record_trace_main(['--backend', 'numpy', '--steps', '{steps}', "
        f"'--no-progress', '-o', {str(out)!r}]))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, cwd=REPO)  # fmt: skip
    return r.returncode, r.stderr.strip().splitlines()


def test_ctrl_c_in_tqdm_finalizer_as_the_run_returns_exits_130(tmp_path: Path) -> None:
    from tracekit.trace.format import load_trace

    out = tmp_path / "t.json"
    setup = (
        "import tqdm\n"
        "real_del = tqdm.tqdm.__del__\n"
        "def finalize(self):\n"
        "    ctrl_c(self)\n"
        "    real_del(self)\n"
        "tqdm.tqdm.__del__ = finalize\n"
    )
    rc, err = _record_in_child(setup, out, steps=1)
    # the trace was written before the bar was finalized: complete, and the Ctrl-C is
    # reported (it was exit 0 and Python's "Exception ignored ... KeyboardInterrupt")
    assert (rc, err) == (
        130,
        ["error: interrupted as the command finished (what it wrote is complete)"],
    )
    t = load_trace(out)
    assert t["complete"] and len(t["steps"]) == 2


def test_ctrl_c_in_a_finalizer_mid_run_saves_the_steps_marked_incomplete(tmp_path: Path) -> None:
    from tracekit.trace.format import load_trace

    out = tmp_path / "t.json"
    setup = (
        "import tracekit.runner.record as rec\n"
        "class Garbage:\n"
        "    __del__ = ctrl_c\n"
        "real = rec.logit_summary\n"
        "def summary(*a, **k):  # during the prefill, a finalizer runs and eats the Ctrl-C\n"
        "    if not getattr(summary, 'done', False):\n"
        "        summary.done = True\n"
        "        Garbage()\n"
        "    return real(*a, **k)\n"
        "rec.logit_summary = summary\n"
    )
    rc, err = _record_in_child(setup, out, steps=4)
    assert (rc, err) == (130, [f"interrupted: saved 1 complete step(s) to {out} (marked "
                               "incomplete)"])  # fmt: skip
    t = load_trace(out)
    assert not t["complete"] and len(t["steps"]) == 1
    assert t["run"]["stop_reason"] == "interrupted"


def test_ctrl_c_handler_is_python_s_own_outside_a_command() -> None:
    import signal

    hook = sys.unraisablehook
    assert record_trace_main(["--tokens", "x"]) == 2
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert sys.unraisablehook is hook
