#!/usr/bin/env python3
"""TinyShakespeare -> token shards (llm.c's dev/data/tinyshakespeare.py, on the shared pipeline).

Downloads karpathy's char-rnn input.txt and the GPT-2 tokenizer files into the cache
($VALUEPATH_CACHE, default ~/.cache/valuepath) unless they are already there, and writes

  data/tinyshakespeare/tinyshakespeare_val_000000.bin     the first 32,768 tokens
  data/tinyshakespeare/tinyshakespeare_train_000001.bin   the rest
  data/tinyshakespeare/gpt2.vptok                         for decoding samples
  data/tinyshakespeare/tinyshakespeare.manifest.json

Split, as llm.c: every blank-line-separated section (one speaker's lines) is a document,
<|endoftext|> goes before each document, and the first --val-tokens tokens of that stream
are val. With the default flags the token streams are identical to llm.c's
tiny_shakespeare_{val,train}.bin.

Example:  python scripts/prepare_tinyshakespeare.py
Offline:  VALUEPATH_OFFLINE=1 VALUEPATH_CACHE=/tmp/vpcache python scripts/prepare_tinyshakespeare.py
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from vp_data import cache, cli, tokenizer  # noqa: E402
from vp_data.pipeline import Job, Source, StreamSpec  # noqa: E402
from vp_data.readers import read_text  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", help="use this input.txt instead of the cached/downloaded one")
    ap.add_argument("--val-tokens", type=cli.head_tokens_arg, default=32768,
                    help="the first this-many tokens are the val split (default 32768, as llm.c)")
    cli.add_common_args(ap, out_dir="data/tinyshakespeare", tokenizer="gpt2", shard_size=100_000_000)
    args = ap.parse_args(argv)

    path = args.input or cache.fetch("tinyshakespeare/input.txt")
    spec = tokenizer.resolve(args.tokenizer, args.tokenizer_path)
    prefix = "tinyshakespeare"
    job = Job(
        out_dir=args.out_dir,
        prefix=prefix,
        tokenizer=spec,
        config={"script": "tinyshakespeare", "input": cli.file_identity(path), "val_tokens": args.val_tokens},
        stream_factory=lambda name: StreamSpec(name, "train", head_tokens=args.val_tokens, head_split="val"),
        **cli.job_kwargs(args),
    )
    source = Source(
        name="input.txt",
        open=lambda bad: read_text(path, bad, split="blank-line"),
        route=lambda doc: "main",
    )
    code = job.run([source])
    if code == 0:
        cli.warn_if_all_val(job, args.val_tokens, "lower --val-tokens")
    return code


if __name__ == "__main__":
    sys.exit(cli.run(main))
