"""The ``tracekit`` and ``record-trace`` commands. Only this module prints and exits.

Every error a user can cause (a bad path, a malformed or unsupported model, a bad trace, an
unusable backend, bad token ids) ends as ONE line on stderr, ``error: ...``, and exit code 2;
no traceback (set ``TRACEKIT_DEBUG=1`` to see one). ``tracekit diff`` exits 1 when the traces
diverge, like diff(1); ``tracekit check`` exits 1 when it finds a bad block or a shape/type
that disagrees with the metadata.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_DIFFERENT, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(ValueError):
    """A command-line value that is well-formed for argparse but wrong (e.g. ``--tokens a,b``)."""


def _one_line(e: BaseException) -> str:
    msg = str(e).strip() or type(e).__name__
    problems = getattr(e, "problems", None)
    if problems and len(problems) > 1:
        where = f"{Path(e.path).name}: " if getattr(e, "path", None) else ""  # type: ignore[attr-defined]
        msg = where + "; ".join(problems)
    return re.sub(r"\s*\n\s*", "; ", msg)


class _SigintWatch:
    """The SIGINT (and SIGTERM) handler while a command runs: raises KeyboardInterrupt as
    Python's own does, and remembers that the signal came and which one (SIGTERM exits 143,
    SIGINT 130, as a shell reports them).

    Python runs a signal handler wherever the main thread is, finalizers included. There the
    KeyboardInterrupt is printed as "Exception ignored in ..." and lost: a Ctrl-C that lands in
    tqdm's ``__del__`` (the progress bar is finalized as a recording returns) or in anything the
    garbage collector finalizes mid-run let the command go on and exit 0. With the signal
    remembered, a lost one is raised again at the next safe point (:meth:`reraise_lost`, after
    each recorded step: the steps so far are saved, marked incomplete), or, when the command has
    already returned, turned into exit 130 and one line.
    """

    def __init__(self) -> None:
        self.pending = False
        self.armed = True  # False while the interrupt is being reported: only remembered then
        self.signum = signal.SIGINT

    def __call__(self, signum: int, frame: Any) -> None:
        self.pending = True
        self.signum = signum
        if self.armed:
            raise KeyboardInterrupt

    def reraise_lost(self, *_: Any) -> None:
        """Raise KeyboardInterrupt if a SIGINT came and nothing raised it (a finalizer ate it)."""
        if self.pending and self.armed:
            self.pending = False
            raise KeyboardInterrupt


@contextmanager
def _watch_sigint() -> Iterator[_SigintWatch | None]:
    # Only where Python's own handler is in place (not under a caller's handler, or in a thread).
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield None
        return
    watch = _SigintWatch()
    default_hook = sys.unraisablehook

    def hook(u: Any) -> None:  # the lost KeyboardInterrupt is handled: no "Exception ignored"
        if not (isinstance(u.exc_value, KeyboardInterrupt) and watch.pending):
            default_hook(u)

    sys.unraisablehook = hook
    signal.signal(signal.SIGINT, watch)
    # SIGTERM (kill's default) ends the command as Ctrl-C does: completed steps saved, no temp
    # file left (its default action killed the process mid-write). Not over a caller's handler.
    term = signal.getsignal(signal.SIGTERM)
    if term is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, watch)
    try:
        yield watch
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if term is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sys.unraisablehook = default_hook


def _run(fn: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    with _watch_sigint() as watch:
        args.sigint_watch = watch
        try:
            code = fn(args)
        except KeyboardInterrupt as e:
            if watch is not None:
                watch.armed = False
            _forget_unhandled_interrupt()
            return _interrupted(e, watch.signum if watch is not None else signal.SIGINT)
        except BrokenPipeError:
            return EXIT_OK
        except Exception as e:  # every failure is one line; malformed files raise anything
            if os.environ.get("TRACEKIT_DEBUG"):
                raise
            if watch is not None and watch.pending:
                # the signal's fallout, not a failure of its own: numpy turns a KeyboardInterrupt
                # inside its C import into an ImportError (a SIGTERM 0.04 s into a run)
                watch.armed = False
                _forget_unhandled_interrupt()
                return _interrupted(KeyboardInterrupt(), watch.signum)
            known = _known_errors()
            prefix = "" if isinstance(e, known) else f"{type(e).__name__}: "
            erase = "\r\x1b[K" if sys.stderr.isatty() else ""  # a status line of record-trace
            print(f"{erase}error: {prefix}{_one_line(e)}", file=sys.stderr)
            return EXIT_ERROR
        if watch is not None and watch.pending:  # a Ctrl-C a finalizer swallowed
            watch.armed = False
            print(
                "error: interrupted as the command finished (what it wrote is complete)",
                file=sys.stderr,
            )
            return _exit_for(watch.signum)
        return code


def _forget_unhandled_interrupt() -> None:
    """Clear CPython's "unhandled KeyboardInterrupt" flag after we handled one.

    A KeyboardInterrupt raised inside code that ``exec`` runs from a string (dataclasses build
    ``__init__``/``__repr__`` that way while gguf imports) sets that flag even when it is caught
    later; under ``python -m`` the interpreter then ends by killing itself with SIGINT, so a
    SIGTERM that came during the imports exited -2 instead of 143 (1 in 60 kill-campaign
    runs). Running any string through ``exec`` resets the flag: a constant, no input."""
    exec("pass")


def _exit_for(signum: int) -> int:
    """130 for SIGINT, 143 for SIGTERM: what a shell reports for a command the signal ended."""
    return 128 + int(signum)


def _interrupted(e: KeyboardInterrupt, signum: int = signal.SIGINT) -> int:
    from tracekit.trace.outpath import InterruptedAfterWrite

    try:
        path, steps = getattr(e, "path", None), getattr(e, "steps", None)
        if isinstance(e, InterruptedAfterWrite):  # held until the final write was done
            print(
                f"interrupted: the signal came during the final write, which was finished: "
                f"{path} is complete",
                file=sys.stderr,
            )
        elif path is not None:  # record-trace saved what it had (RecordInterrupted)
            print(
                f"interrupted: saved {steps} complete step(s) to {path} (marked incomplete)",
                file=sys.stderr,
            )
        elif steps == 0:
            print(
                "error: interrupted before the first step completed; nothing written",
                file=sys.stderr,
            )
        else:
            print("error: interrupted", file=sys.stderr)
    except BrokenPipeError:
        pass
    return _exit_for(signum)


def _known_errors() -> tuple[type[BaseException], ...]:
    # Errors whose message already says what is wrong; others get their type name prefixed.
    # Called while reporting an error: an import that fails here (numpy half-imported) must
    # not turn the one line into a traceback.
    try:
        from tracekit.kernels.backend import BackendUnavailable
        from tracekit.kernels.checks import KernelInputError
        from tracekit.trace.format import TraceError
        from tracekit.trace.outpath import OutputPathError
    except Exception:
        return (UsageError,)
    out: list[type[BaseException]] = [
        UsageError,
        OutputPathError,
        BackendUnavailable,
        KernelInputError,
        TraceError,
        FileNotFoundError,
    ]
    for mod, name in (
        ("tracekit.trace.tensors", "DumpError"),
        ("tracekit.model.config", "ModelError"),
        ("tracekit.runner.ops", "OpError"),
        ("tracekit.trace.ncu", "NcuError"),
        ("tracekit.model.tokenizer", "TokenizerError"),
        ("tracekit.runner.execute", "GenerationError"),
    ):
        try:
            out.append(getattr(__import__(mod, fromlist=[name]), name))
        except Exception:  # ImportError, AttributeError, or a half-imported dependency
            pass
    return tuple(out)


# -- record-trace -------------------------------------------------------------------------------
def _add_record_args(p: argparse.ArgumentParser) -> None:
    from tracekit.kernels.matmul import MATMUL_MODES

    p.add_argument("model", nargs="?", help="a .gguf model (default: the bundled demo model)")
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--prompt", help="prompt text, tokenized by the model's tokenizer (default: 'Hello')"
    )
    src.add_argument("--tokens", help="prompt token ids, e.g. '1,2,3' or '1 2 3'")
    p.add_argument(
        "--steps", type=int, default=8, help="decode steps after the prefill (default 8)"
    )
    p.add_argument("--backend", choices=("auto", "cupy", "numpy"), default="auto")
    p.add_argument(
        "--capture",
        choices=("full", "timing"),
        default="full",
        help="full: timing pass + statistics pass per step; timing: node times only",
    )
    p.add_argument(
        "--matmul",
        choices=MATMUL_MODES,
        default=None,
        help="matmul path: quant (GGUF blocks streamed by mmvq up to 8 tokens, larger batches"
        " by dequant + f16 GEMM; cupy default), mmq (quant, and larger batches by int8 mmq),"
        " f16 (dequant + GEMM, as MINFER_MMQ=0) or f32 (numpy default)",
    )
    p.add_argument(
        "--w16-cache",
        choices=("auto", "on", "off"),
        default="auto",
        help="dequantize matmul weights to f16 once at load (auto: on for --matmul f16 with"
        " >= 2 GiB of matmul weights)",
    )
    p.add_argument(
        "--fuse",
        choices=("on", "off"),
        default="on",
        help="on: q/k/v and gate/up as one matmul each where their weights share a type (one"
        " launch; the trace's notes say which); off: one matmul node per projection",
    )
    p.add_argument("--cuda-graph", action="store_true", help="replay decode steps as CUDA graphs")
    p.add_argument(
        "--pdl", nargs="?", const="on", default="auto", choices=("auto", "on", "off"),
        help="with --cuda-graph: each kernel of the decode graph may launch while the one before "
        "it runs and waits for it on the device (programmatic dependent launch, sm_90); auto "
        "(default): on where the device can, off otherwise; --pdl alone: on",
    )  # fmt: skip
    p.add_argument(
        "--alternate-modes", action="store_true",
        help="with --cuda-graph: decode steps alternate between the graph and a launch-by-launch "
        "stream replay of the same recorded step (same kernels, same buffers), so each node's "
        "two times differ only by how it was launched",
    )  # fmt: skip
    p.add_argument("--no-nvtx", action="store_true", help="do not emit NVTX ranges")
    p.add_argument(
        "--temperature",
        type=_temperature,
        default=0.0,
        help=f"> 0 samples, at least {MIN_TEMPERATURE:g} (default 0: greedy)",
    )
    p.add_argument(
        "--top-k", type=_count("--top-k"), default=0, help="sample among the k most likely (0: all)"
    )
    p.add_argument("--seed", type=_seed, default=0, help="sampling seed, 0..2**63-1")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument(
        "--remeasure", action="store_true", help="measure the device ceilings again (else cached)"
    )
    p.add_argument("-o", "--output", help="output trace (default: traces/<model>-<backend>.json)")
    p.add_argument(
        "--dump",
        metavar="REGEX",
        help="keep the whole output of every node whose name matches REGEX (e.g. 'blk\\.0\\..*'), "
        "every step, in a safetensors sidecar next to the trace",
    )
    p.add_argument(
        "--save-logits",
        action="store_true",
        help="keep each step's logits and the token ids in the sidecar",
    )
    p.add_argument(
        "--dump-limit",
        metavar="SIZE",
        help="refuse to start when the sidecar's estimated size exceeds SIZE (e.g. 500M, 2G)",
    )


#: The smallest sampling temperature taken: below it sampling is greedy in all but name (and
#: 1e-320 made logits / T overflow to inf before the fix in Sampling).
MIN_TEMPERATURE = 1e-4


def _temperature(text: str) -> float:
    try:
        t = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(t):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    if t < 0:
        raise argparse.ArgumentTypeError(f"{t} must be >= 0")
    if 0 < t < MIN_TEMPERATURE:
        raise argparse.ArgumentTypeError(
            f"{text} is too small: give 0 (greedy) or at least {MIN_TEMPERATURE:g}"
        )
    return t


def _count(flag: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if n < 0:
            raise argparse.ArgumentTypeError(f"{n} must be >= 0")
        return n

    parse.__name__ = flag  # argparse names the type in "invalid ... value"
    return parse


def _seed(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= n < 2**63:  # numpy's generator refuses negatives; a trace stores int64
        raise argparse.ArgumentTypeError(f"{n} must be in 0..2**63-1")
    return n


#: A token id as typed: ASCII digits with an optional sign. Python's int() also takes "1_0"
#: (as 10) and other scripts' digits ("１", "٣"), which would run a prompt nobody typed.
_TOKEN_ID = re.compile(r"[+-]?[0-9]+")


def parse_tokens(text: str) -> list[int]:
    """``"1,2,3"`` or ``"1 2 3"`` -> [1, 2, 3]."""
    parts = [t for t in re.split(r"[,\s]+", text.strip()) if t]
    if not parts:
        raise UsageError("--tokens is empty: give ids like '1,2,3'")
    out = []
    for i, t in enumerate(parts):
        if not _TOKEN_ID.fullmatch(t):
            raise UsageError(
                f"--tokens: {t!r} at position {i} is not an integer id (digits 0-9 only)"
            )
        out.append(int(t))
    return out


def _record(args: argparse.Namespace) -> int:
    from tracekit.runner.record import record_trace

    if args.steps < 0:
        raise UsageError(f"--steps {args.steps} must be >= 0")
    if args.temperature < 0:
        raise UsageError(f"--temperature {args.temperature} must be >= 0")
    if args.top_k < 0:
        raise UsageError(f"--top-k {args.top_k} must be >= 0")
    tokens = parse_tokens(args.tokens) if args.tokens is not None else None
    if getattr(args, "matmul", None) == "f32" and args.backend == "cupy":
        raise UsageError("--matmul f32 runs on the numpy backend only; cupy runs quant or f16")
    if args.model is not None and not Path(args.model).is_file():
        what = "is a folder" if Path(args.model).is_dir() else "does not exist"
        raise UsageError(f"model {args.model} {what}")
    dump_limit = None
    if args.dump_limit is not None:
        from tracekit.trace.tensors import parse_size

        try:
            dump_limit = parse_size(args.dump_limit)
        except ValueError as e:
            raise UsageError(f"--dump-limit: {e}") from None
        if args.dump is None and not args.save_logits:
            raise UsageError("--dump-limit needs --dump or --save-logits")
    sampling: dict[str, Any] = {"mode": "greedy"}
    if args.temperature > 0:
        sampling = {
            "mode": "sample",
            "temperature": args.temperature,
            "top_k": args.top_k,
            "seed": args.seed,
        }
    out = record_trace(
        args.model,
        prompt=args.prompt,
        tokens=tokens,
        steps=args.steps,
        backend=args.backend,
        capture=args.capture,
        output=args.output,
        nvtx=not args.no_nvtx,
        cuda_graph=args.cuda_graph,
        alternate_modes=getattr(args, "alternate_modes", False),
        pdl={"auto": None, "on": True, "off": False}[getattr(args, "pdl", "auto")],
        progress=not args.no_progress,
        sampling=sampling,
        remeasure=args.remeasure,
        matmul=getattr(args, "matmul", None),
        w16_cache=getattr(args, "w16_cache", "auto"),
        fuse=getattr(args, "fuse", "on") == "on",
        on_step=getattr(args, "sigint_watch", None) and args.sigint_watch.reraise_lost,
        dump=args.dump,
        save_logits=args.save_logits,
        dump_limit=dump_limit,
        on_dump_estimate=_print_dump_estimate,
    )
    print(out)
    return EXIT_OK


def _print_dump_estimate(plan: Any) -> None:
    what = f"{len(plan.nodes)} node(s)" if plan.nodes else "no nodes"
    print(
        f"tensor sidecar: {what}, {plan.count} tensors, {_fmt_bytes(plan.bytes)} "
        f"({plan.bytes:,} bytes) if every step runs",
        file=sys.stderr,
        flush=True,
    )


# -- info ---------------------------------------------------------------------------------------
def _fmt_bytes(n: int) -> str:
    from tracekit.trace.perf import fmt_bytes

    return fmt_bytes(n)


def info_text(model: Any, tensors: bool = False) -> str:
    """What ``tracekit info`` prints for a loaded model."""
    from tracekit.model.metadata import printable
    from tracekit.trace.arch_settings import describe_arch

    c = model.config
    path = Path(model.path)
    total = sum(t.nbytes for t in model.tensors.values())
    by_type: dict[str, list[int]] = {}
    for t in model.tensors.values():
        e = by_type.setdefault(t.qtype.name, [0, 0])
        e[0] += 1
        e[1] += t.nbytes
    lines = [
        f"model:        {printable(c.name or path.stem)} ({printable(path.name)}, "
        f"{_fmt_bytes(path.stat().st_size)})",
        f"architecture: {c.arch}",
        f"layers:       {c.n_layer}",
        f"n_embd:       {c.n_embd}    n_ff: {c.n_ff}",
        f"heads:        {c.n_head} (kv {c.n_head_kv}), head_dim {c.head_dim}",
        f"vocab:        {c.n_vocab}    context: {c.n_ctx}",
        *(f"{label + ':':13s} {text}" for label, text in describe_arch(c.summary())),
        *(f"note:         {n}" for n in c.notes),
        f"output:       {'tied to token_embd' if c.tied_output else 'output.weight'}",
        f"graph nodes:  {len(model.graph)} per step",
        f"tensors:      {len(model.tensors)}, {_fmt_bytes(total)} ({total:,} bytes)",
    ]
    for name, (count, nbytes) in sorted(by_type.items(), key=lambda kv: -kv[1][1]):
        lines.append(
            f"  {name:6s} {count:5d} tensors  {_fmt_bytes(nbytes):>9s}  ({nbytes:,} bytes)"
        )
    if tensors:
        lines.append("")
        for t in model.tensors.values():
            shape = "x".join(str(s) for s in t.shape)
            name = printable(t.name)
            lines.append(f"  {name:40s} {t.qtype.name:6s} {shape:>16s} {t.nbytes:>12,d}")
    return "\n".join(lines)


def _info(args: argparse.Namespace) -> int:
    from tracekit.runner.execute import load_model

    if not Path(args.model).is_file():
        what = "is a folder" if Path(args.model).is_dir() else "does not exist"
        raise UsageError(f"model {args.model} {what}")
    print(info_text(load_model(args.model), tensors=args.tensors))
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    import json

    from tracekit.model.check import check_model

    report = check_model(args.model)
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        print(report.text())
    return EXIT_DIFFERENT if report.found else EXIT_OK


# -- export / diff / ncu-import -------------------------------------------------------------------
def _export(args: argparse.Namespace) -> int:
    from tracekit.trace.export import export_chrome, export_logits
    from tracekit.trace.format import load_trace
    from tracekit.trace.outpath import check_output_path

    if args.format != "logits":  # the logits export writes its own files (export_logits)
        check_output_path(args.out, inputs=[args.trace])  # before the (long) load
    trace = load_trace(args.trace)
    if args.format == "logits":
        for path in export_logits(trace, args.trace, args.out):
            print(path)
        return EXIT_OK
    out = export_chrome(trace, args.out)
    print(out)
    return EXIT_OK


def _diff(args: argparse.Namespace) -> int:
    import json

    from tracekit.trace.diff import diff_traces
    from tracekit.trace.format import load_trace
    from tracekit.trace.tensors import load_tensors

    a, b = load_trace(args.a), load_trace(args.b)
    for path, t in ((args.a, a), (args.b, b)):
        # an interrupted run must not pass a CI diff against a golden trace
        if not t["steps"]:
            raise UsageError(f"{path} has no steps: nothing to compare")
        if t["complete"] is not True and not args.allow_incomplete:
            raise UsageError(
                f"{path} is incomplete (complete: false, stop reason "
                f"{t['run'].get('stop_reason')}, {len(t['steps'])} step(s)): give "
                "--allow-incomplete to compare the steps it has"
            )
    ta = tb = None
    if not args.no_tensors:
        ta, tb = load_tensors(a, args.a), load_tensors(b, args.b)
    report = diff_traces(
        a, b, rtol=args.rtol, atol=args.atol, tensors_a=ta, tensors_b=tb,
        tensor_rtol=args.tensor_rtol,
    )  # fmt: skip
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        print(f"A: {args.a}\nB: {args.b}")
        print(report.text())
    return EXIT_DIFFERENT if report.diverged else EXIT_OK


def _ncu_import(args: argparse.Namespace) -> int:
    from tracekit.trace.format import load_trace, write_trace
    from tracekit.trace.ncu import import_ncu, summary
    from tracekit.trace.outpath import check_output_path

    check_output_path(args.output or args.trace, inputs=[args.csv])  # in place is the default
    trace = import_ncu(load_trace(args.trace), args.csv)
    out = write_trace(trace, args.output or args.trace)
    print(summary(trace))
    m = trace["ncu"]
    print(
        f"{m['kernels_matched']} of {m['kernels_in_csv']} kernels joined onto "
        f"{m['nodes_matched']} node records; wrote {out}"
    )
    return EXIT_OK


# -- entry points ---------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tracekit",
        description="Trace a GGUF transformer's forward pass node by node (NVTX, stats, roofline).",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    r = sub.add_parser("record-trace", help="run a model and record a trace")
    _add_record_args(r)
    r.set_defaults(fn=_record)
    i = sub.add_parser("info", help="architecture, dimensions, tensor types and bytes of a model")
    i.add_argument("model")
    i.add_argument("--tensors", action="store_true", help="also list every tensor")
    i.set_defaults(fn=_info)
    c = sub.add_parser(
        "check",
        help="scan every tensor of a GGUF file for non-finite scales/values, all-zero blocks "
        "and shapes/types against the metadata (exit 1 if anything is found, 2 if unreadable)",
    )
    c.add_argument("model")
    c.add_argument("--json", action="store_true", help="the report as JSON")
    c.set_defaults(fn=_check)
    e = sub.add_parser("export", help="export a trace for another viewer")
    e.add_argument(
        "--format",
        choices=("chrome", "logits"),
        default="chrome",
        help="chrome: Chrome Trace Event JSON; logits: the saved logits (record with "
        "--save-logits) as OUT.npy, f32 [steps, n_vocab], and the chosen ids as OUT.tokens.npy",
    )
    e.add_argument("trace")
    e.add_argument("out")
    e.set_defaults(fn=_export)
    d = sub.add_parser(
        "diff", help="node-by-node comparison of two traces (exit 1 if they diverge)"
    )
    d.add_argument("a")
    d.add_argument("b")
    d.add_argument(
        "--rtol",
        type=float,
        default=None,
        help="statistics tolerance relative to the tensor's absmax (default: calibrated for the "
        "runs' numerical path, stated in the report)",
    )
    d.add_argument("--atol", type=float, default=None, help="(default: calibrated)")
    d.add_argument(
        "--tensor-rtol",
        type=float,
        default=None,
        help="with dumps on both sides: a node output's max |a - b| / max |a|,|b| tolerance "
        "(default: calibrated)",
    )
    d.add_argument(
        "--no-tensors", action="store_true", help="ignore tensor sidecars: statistics only"
    )
    d.add_argument("--json", action="store_true", help="the report as JSON")
    d.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="compare a trace marked incomplete (an interrupted run) over the steps it has",
    )
    d.set_defaults(fn=_diff)
    n = sub.add_parser("ncu-import", help="join Nsight Compute CSV metrics onto a trace's nodes")
    n.add_argument("trace")
    n.add_argument("csv")
    n.add_argument("-o", "--output", help="output trace (default: update TRACE in place)")
    n.set_defaults(fn=_ncu_import)
    sub.add_parser("bench", help="benchmarks (tracekit bench --help)", add_help=False)
    sub.add_parser(
        "viz", help="open traces in the browser app (tracekit viz --help)", add_help=False
    )
    return p


def _delegate(command: str, rest: list[str]) -> int:
    def go(_: argparse.Namespace) -> int:
        if command == "bench":
            from tracekit.bench import bench_main as entry
        else:
            from tracekit.viz.app import viz_main as entry
        try:
            code = int(entry(rest) or 0)
            watch = getattr(ns, "sigint_watch", None)
            if command == "viz" and watch is not None:
                watch.pending = False  # Ctrl-C is how a server is stopped: exit 0, no message
            return code
        except SystemExit as e:  # their argparse: --help (0), usage errors (2)
            return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_ERROR)

    ns = argparse.Namespace()
    return _run(go, ns)


def _join_token_lists(argv: list[str]) -> list[str]:
    """``--tokens -1,2`` -> ``--tokens=-1,2``: argparse takes a value that starts with '-' and is
    not a plain negative number for an option, and would print a usage screen instead of the
    id's own error."""
    out: list[str] = []
    it = iter(argv)
    for a in it:
        if a == "--tokens":
            nxt = next(it, None)
            if nxt is None:
                out.append(a)
            elif nxt.startswith("-") and not nxt.startswith("--"):
                out.append(f"--tokens={nxt}")
            else:
                out += [a, nxt]
        else:
            out.append(a)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``tracekit COMMAND ...``; returns the exit code."""
    argv = _join_token_lists(list(sys.argv[1:] if argv is None else argv))
    if argv and argv[0] in ("bench", "viz"):
        return _delegate(argv[0], argv[1:])
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse: usage errors (2) and --help (0)
        return int(e.code or 0)
    except KeyboardInterrupt:  # Ctrl-C before the command started
        print("error: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return _run(args.fn, args)


def record_trace_main(argv: Sequence[str] | None = None) -> int:
    """The ``record-trace`` console script; returns the exit code."""
    p = argparse.ArgumentParser(
        prog="record-trace", description="Run a GGUF model and record a tracekit trace."
    )
    _add_record_args(p)
    try:
        args = p.parse_args(_join_token_lists(list(sys.argv[1:] if argv is None else argv)))
    except SystemExit as e:
        return int(e.code or 0)
    except KeyboardInterrupt:  # Ctrl-C before the run started
        print("error: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return _run(_record, args)


if __name__ == "__main__":
    sys.exit(main())
