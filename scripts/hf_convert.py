#!/usr/bin/env python3
"""valuepath checkpoints <-> Hugging Face transformers models (numpy only; no torch needed).

  export CKPT OUT_DIR [--tokenizer gpt2|neox|llama2] [--dtype float32|bfloat16]
      A checkpoint (either build's; the weights are the fp32 master weights) as an HF model
      directory: config.json + model.safetensors (float32, or bfloat16), and with --tokenizer the HF
      tokenizer files, so that
          AutoModelForCausalLM.from_pretrained(OUT_DIR), AutoTokenizer.from_pretrained(OUT_DIR)
      load it, e.g. for lm-evaluation-harness (`lm_eval --model hf --model_args pretrained=OUT_DIR`).
      gpt2 -> GPT2LMHeadModel, llama -> LlamaForCausalLM, llama --qk-norm 1 -> Qwen3ForCausalLM.
      The other value paths (or --remote-code) -> ValuepathForCausalLM, whose code (the project's
      PyTorch reference) travels in OUT_DIR: load it with trust_remote_code=True.

  import SRC OUT_CKPT [--max-seq N]
      An HF gpt2 / llama / qwen3 model (or a ValuepathForCausalLM that export wrote) (a save_pretrained directory with safetensors weights, or a
      hub model: gpt2, gpt2-medium, gpt2-large, gpt2-xl or hub:OWNER/NAME, downloaded into
      $VALUEPATH_CACHE/hf-models/ unless already there) as a checkpoint for --init-from:
          python scripts/hf_convert.py import gpt2 gpt2_124M.ckpt
          ./train_cpu --init-from gpt2_124M.ckpt --max-steps 0 --val-data '...' --seq-len 1024
      --max-seq sets the longest T (Llama/Qwen3 configs often allow far more than you train on;
      GPT-2 keeps that many rows of its position table).

The exact mapping and what is refused: scripts/vp_data/hf.py and docs/formats.md.
Exit codes: 0 done, 1 a bad input file or a model that does not map (the message says why), 2 usage.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from vp_data import cli, hf  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("export", help="valuepath checkpoint -> HF model directory")
    ex.add_argument("ckpt", help="a valuepath checkpoint (ckpt_*.bin)")
    ex.add_argument("out_dir", help="the HF model directory to write")
    ex.add_argument("--tokenizer", type=cli.tokenizer_name,
                    help="also write this tokenizer's HF files (gpt2, neox, llama2), from the cache")
    ex.add_argument("--force", action="store_true", help="replace files already in out_dir")
    ex.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                    help="weights as trained (float32, default) or rounded to bfloat16 (half the size)")
    ex.add_argument("--remote-code", action="store_true",
                    help="write the trust_remote_code model even for a vanilla checkpoint (other paths always do)")
    im = sub.add_parser("import", help="HF model -> valuepath checkpoint (for --init-from)")
    im.add_argument("src", help="an HF model directory, or gpt2 / gpt2-medium / gpt2-large / gpt2-xl / hub:OWNER/NAME")
    im.add_argument("out_ckpt", help="the checkpoint file to write")
    im.add_argument("--max-seq", type=cli.positive_int, help="the model's longest sequence (default: the HF config's)")
    im.add_argument("--force", action="store_true", help="replace out_ckpt if it exists")
    args = ap.parse_args(argv)

    if args.command == "export":
        config = hf.export(args.ckpt, args.out_dir, args.tokenizer, args.force, args.remote_code, args.dtype)
        print(f"wrote {args.out_dir}: {config['architectures'][0]}, vocab {config['vocab_size']}"
              + (f", tokenizer {args.tokenizer}" if args.tokenizer else "")
              + ("; load it with trust_remote_code=True" if "auto_map" in config else ""))
    else:
        cfg = hf.import_model(args.src, args.out_ckpt, args.max_seq, args.force)
        print(f"wrote {args.out_ckpt}: {cfg.arch}, {cfg.n_layer} layers, {cfg.n_head} heads ({cfg.n_kv_head} kv), "
              f"dim {cfg.n_embd}, ffn {cfg.ffn_dim}, vocab {cfg.vocab_size}, max seq {cfg.max_seq_len}"
              + (", qk-norm" if cfg.qk_norm else "") + (", tied head" if cfg.tied_head else "")
              # a build of another value path refuses it: say which one loads it
              + (f"; value path {cfg.path}: load it with a VALUE_PATH={cfg.path} build "
                 f"(make train_cpu VALUE_PATH={cfg.path}, or make train VALUE_PATH={cfg.path})"
                 if cfg.path != "vanilla" else ""))
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
