"""Make the tiny per-architecture test models the way real GGUF files are made.

For each architecture: a seeded, randomly initialised Hugging Face model (2-3 layers, GQA, a
64-wide residual, a 16-dim head) is saved with ``save_pretrained`` next to a tiny SentencePiece
tokenizer, then converted by llama.cpp's own ``convert_hf_to_gguf.py`` to f32, q8_0 and bf16.
That exercises the tensor names, Q/K permutations, norm offsets and metadata keys real files
carry, which a writer of our own could get wrong in the same way as our reader.

Output (committed, about 5 MB): ``tests/data/archs/<name>/hf/`` (config.json,
model.safetensors, tokenizer.model) and ``tests/data/archs/<name>/<name>-{f32,q8_0,bf16}.gguf``.
The CPU tests recompute HF fp32 logits from ``hf/`` with the installed transformers.

Run it with the transformers version llama.cpp pins for its converter (4.57.6; 5.x rejects some
tokenizers), in a venv of its own, pointing at a llama.cpp checkout (``vendor/llama.cpp`` of the
``llama-cpp-python`` 0.3.36 sdist: it carries ``convert_hf_to_gguf.py``, ``conversion/`` and
``gguf-py/``)::

    pip download llama-cpp-python==0.3.36 --no-deps --no-binary :all: -d /tmp/dl
    tar xzf /tmp/dl/llama_cpp_python-0.3.36.tar.gz -C /tmp/dl
    python -m venv /tmp/venv-convert
    /tmp/venv-convert/bin/pip install torch transformers==4.57.6 'numpy~=2.2.6' \\
        'sentencepiece<0.3' 'protobuf<5' safetensors
    /tmp/venv-convert/bin/python scripts/make_arch_models.py \\
        --llama-cpp /tmp/dl/llama_cpp_python-0.3.36/vendor/llama.cpp
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "data" / "archs"

#: Shared by every tiny model: GQA (4 query heads on 2 KV heads), head_dim 16.
COMMON: dict[str, Any] = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "rms_norm_eps": 1e-6,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
    # wider than the default 0.02 so the logits spread out (a flat model makes top-1 meaningless)
    "initializer_range": 0.1,
}

#: name -> (transformers config class, config overrides, outtypes).
ARCHS: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    # Llama 3.1-style rope: the converter turns rope_scaling into an F32 rope_freqs.weight. A short
    # original context (32) puts the 8 frequencies of a 16-dim head in all three of llama3's
    # bands (kept, smoothed, divided by the factor) so a 12-token prompt sees them.
    "llama3": (
        "LlamaConfig",
        {
            "rope_theta": 10000.0,
            "max_position_embeddings": 128,
            "tie_word_embeddings": False,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,
            },
        },
        ("f32", "q8_0", "bf16"),
    ),
    # Mistral 7B v0.1-style: a 4096 sliding window, which the converter drops (arch llama, no
    # window key); wider than any test prompt, so HF's windowed attention is full attention here.
    "mistral": (
        "MistralConfig",
        {
            "rope_theta": 1000000.0,
            "max_position_embeddings": 128,
            "sliding_window": 4096,
            "tie_word_embeddings": False,
        },
        ("f32", "q8_0", "bf16"),
    ),
    # Qwen3-0.6B-style: per-head q/k RMSNorm, no biases, tied output.
    "qwen3": (
        "Qwen3Config",
        {
            "rope_theta": 1000000.0,
            "max_position_embeddings": 128,
            "tie_word_embeddings": True,
            "use_sliding_window": False,
        },
        ("f32", "q8_0", "bf16"),
    ),
    # Phi-3-mini-4k-style: fused qkv_proj and gate_up_proj, a 2047 sliding window in the config
    # (written to the file; llama.cpp runs phi3 with full attention), no long-rope factors.
    "phi3": (
        "Phi3Config",
        {
            "rope_theta": 10000.0,
            "max_position_embeddings": 4096,
            "original_max_position_embeddings": 4096,
            "sliding_window": 2047,
            "tie_word_embeddings": False,
            "rope_scaling": None,
        },
        ("f32", "q8_0", "bf16"),
    ),
    # Gemma 2-style: attention and final logit soft-caps small enough to bite on a tiny model, a
    # 4-token window on layers 0 and 2, query_pre_attn_scalar = head_dim (what llama.cpp assumes:
    # the converter writes no key for it), post-attention / post-FFW norms, GELU-tanh, tied.
    "gemma2": (
        "Gemma2Config",
        {
            "num_hidden_layers": 3,
            "rope_theta": 10000.0,
            "max_position_embeddings": 128,
            "query_pre_attn_scalar": 16,
            "sliding_window": 4,
            "attn_logit_softcapping": 5.0,
            "final_logit_softcapping": 3.0,
            "hidden_activation": "gelu_pytorch_tanh",
            "tie_word_embeddings": True,
            "initializer_range": 0.2,
        },
        ("f32", "q8_0", "bf16"),
    ),
}

SEED = 14


def train_tokenizer(dest: Path) -> Path:
    """A 200-piece SentencePiece BPE model trained on the README (deterministic, one thread)."""
    import sentencepiece as spm

    text = (REPO / "README.md").read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        corpus.write_text("\n".join(s for s in text.splitlines() if s.strip()), encoding="utf-8")
        spm.SentencePieceTrainer.train(
            input=str(corpus),
            model_prefix=str(Path(tmp) / "tok"),
            model_type="bpe",
            vocab_size=200,
            character_coverage=1.0,
            num_threads=1,
            unk_id=0,
            bos_id=1,
            eos_id=2,
            pad_id=-1,
            normalization_rule_name="identity",  # no 230 KB NFKC table in the model
            minloglevel=2,
        )
        shutil.copy(Path(tmp) / "tok.model", dest)
    return dest


def make_hf(name: str, hf_dir: Path, tokenizer: Path) -> None:
    import torch
    import transformers

    cls_name, overrides, _ = ARCHS[name]
    cfg = getattr(transformers, cls_name)(**{**COMMON, **overrides})
    cfg.architectures = [cls_name.replace("Config", "ForCausalLM")]
    torch.manual_seed(SEED)
    model = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
    with torch.no_grad():  # norms start at 1 (gemma: 0); move them so a wrong offset shows
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.add_(0.2 * torch.randn_like(p))
    model.save_pretrained(hf_dir, safe_serialization=True)
    (hf_dir / "generation_config.json").unlink(missing_ok=True)  # sampling defaults: unused
    shutil.copy(tokenizer, hf_dir / "tokenizer.model")


def convert(llama_cpp: Path, hf_dir: Path, out: Path, outtype: str) -> None:
    subprocess.run(
        [
            sys.executable,
            str(llama_cpp / "convert_hf_to_gguf.py"),
            str(hf_dir),
            "--outtype",
            outtype,
            "--outfile",
            str(out),
            "--model-name",  # general.name, as a real file carries it ("Mistral 7B v0.1")
            f"tiny {hf_dir.parent.name}",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--llama-cpp", type=Path, required=True, help="llama.cpp source directory")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only", nargs="*", choices=list(ARCHS), help="architectures to make")
    args = ap.parse_args(argv)
    import transformers

    if transformers.__version__ != "4.57.6":
        print(f"warning: transformers {transformers.__version__}, llama.cpp pins 4.57.6")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = train_tokenizer(Path(tmp) / "tokenizer.model")
        for name in args.only or list(ARCHS):
            d = args.out / name
            shutil.rmtree(d, ignore_errors=True)
            make_hf(name, d / "hf", tokenizer)
            for outtype in ARCHS[name][2]:
                convert(args.llama_cpp, d / "hf", d / f"{name}-{outtype}.gguf", outtype)
            sizes = ", ".join(
                f"{p.name} {p.stat().st_size // 1024} KiB" for p in sorted(d.rglob("*.*"))
            )
            print(f"{name}: {sizes}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
