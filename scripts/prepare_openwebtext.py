#!/usr/bin/env python3
"""OpenWebText -> GPT-2 token shards (the Skip-Layer Attention setup; nanoGPT/llm.c style).

Input, one of:
  (default)        HF `datasets.load_dataset(--hf-name, split=--hf-split)`; the current hub
                   form is "Skylion007/openwebtext" (Parquet, 8,013,769 documents, ~9B GPT-2
                   tokens). Downloads and the Arrow cache go to $VALUEPATH_CACHE/hf unless
                   HF_HOME is set; offline runs use what is there. --hf-name can also be a
                   local directory of Parquet files in the hub layout.
  --from-disk DIR  a `Dataset.save_to_disk` dump
  --parquet F ...  local Parquet files (read directly with pyarrow, no `datasets`)

Tokenizer: GPT-2 (tiktoken built from the cached encoder.json/vocab.bpe); <|endoftext|>
before every document. Val: a document is val when a keyed hash of its text is below
--val-fraction (default 0.0005, nanoGPT's test_size), so about 4,000 documents / 4M
tokens; the split does not depend on order or worker count.

Output (default data/openwebtext/):
  openwebtext_train_000000.bin ...  (--shard-size tokens each, default 100M)
  openwebtext_val_000000.bin
  gpt2.vptok, openwebtext.manifest.json

Example:  python scripts/prepare_openwebtext.py
          python scripts/prepare_openwebtext.py --max-tokens 1e9   # the first ~1B tokens only
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from vp_data import DataError, cache, cli, tokenizer  # noqa: E402
from vp_data.pipeline import Job, Source, StreamSpec  # noqa: E402
from vp_data.readers import expand_inputs, read_hf_dataset, read_parquet  # noqa: E402

HUB_NAME = "Skylion007/openwebtext"


def hf_env() -> None:
    """Point HF at our cache and honour our offline flag; must run before importing
    `datasets`/`huggingface_hub`, which read these variables at import time."""
    os.environ.setdefault("HF_HOME", cache.cache_path("hf"))
    if cache.offline():
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["HF_DATASETS_OFFLINE"] = "1"


def load_hf(args):
    hf_env()
    try:
        import datasets
    except ImportError:
        raise DataError("the `datasets` package is missing; install requirements.txt into .venv") from None
    if args.no_progress:
        datasets.disable_progress_bars()
    try:
        if args.from_disk:
            ds = datasets.load_from_disk(args.from_disk)
            if isinstance(ds, datasets.DatasetDict):
                if args.hf_split not in ds:
                    raise DataError(f"{args.from_disk}: no split {args.hf_split!r} (has {', '.join(ds)})")
                ds = ds[args.hf_split]
            return ds, args.from_disk
        ds = datasets.load_dataset(args.hf_name, split=args.hf_split, num_proc=args.download_procs)
        return ds, args.hf_name
    except DataError:
        raise
    except Exception as e:  # datasets raises many types (ConnectionError, FileNotFoundError, ...)
        where = args.from_disk or args.hf_name
        hint = ""
        if cache.offline():
            hint = (f"; we are offline and it is not in the HF cache ({os.environ.get('HF_HOME')}): run once online, "
                    f"or use --parquet/--from-disk with local files")
        raise DataError(f"cannot load dataset {where!r} (split {args.hf_split}): {type(e).__name__}: {e}{hint}") from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_argument_group("input")
    src.add_argument("--hf-name", default=HUB_NAME, help=f"HF hub dataset or local dir (default {HUB_NAME})")
    src.add_argument("--hf-split", default="train", help="dataset split (default train)")
    src.add_argument("--from-disk", help="read a datasets.save_to_disk dump instead of the hub")
    src.add_argument("--parquet", nargs="+", metavar="FILE", help="read these Parquet files (or dirs/globs) directly")
    src.add_argument("--text-field", default="text", help="column with the document (default text)")
    src.add_argument("--download-procs", type=cli.positive_int, default=None,
                     help="parallel downloads / Arrow conversion in load_dataset (default: datasets' default)")
    ap.add_argument("--val-fraction", type=cli.fraction, default=0.0005, help="fraction of documents for val (default 0.0005)")
    ap.add_argument("--seed", type=cli.integer, default=2357, help="key of the val hash (default 2357, nanoGPT's seed)")
    ap.add_argument("--max-tokens", type=cli.positive_int, help="stop after about this many train tokens")
    cli.add_common_args(ap, out_dir="data/openwebtext", tokenizer="gpt2", shard_size=100_000_000)
    args = ap.parse_args(argv)

    spec = tokenizer.resolve(args.tokenizer, args.tokenizer_path)
    if args.parquet:
        files = expand_inputs(args.parquet)
        input_id = {"parquet": cli.files_identity(files)}

        def open_docs(bad):
            for f in files:
                yield from read_parquet(f, bad, text_field=args.text_field)
    else:
        ds, name = load_hf(args)
        # What identifies the data for resuming: name, split and size (datasets' own
        # _fingerprint depends on the cache location, so it is not used).
        input_id = {"hf": name if args.from_disk is None else os.path.basename(os.path.abspath(name)),
                    "split": args.hf_split, "rows": ds.num_rows, "bytes": ds.data.nbytes}

        def open_docs(bad):
            return read_hf_dataset(ds, name, bad, text_field=args.text_field)

    quota = {"*": args.max_tokens} if args.max_tokens else None
    job = Job(
        out_dir=args.out_dir,
        prefix="openwebtext",
        tokenizer=spec,
        config={
            "script": "openwebtext",
            "input": input_id,
            "text_field": args.text_field,
            "val": {"fraction": args.val_fraction, "seed": args.seed},
            "max_tokens": args.max_tokens,
        },
        stream_factory=lambda s: StreamSpec(s, s, quota=quota if s == "train" else None),
        **cli.job_kwargs(args),
    )
    source = Source(
        name="openwebtext",
        open=open_docs,
        route=lambda doc: "val" if cli.hash01(doc.text, args.seed) < args.val_fraction else "train",
        targets=["train"],
    )
    code = job.run([source])
    if code == 0 and args.val_fraction > 0:
        cli.warn_if_no_val(job, "raise --val-fraction")
    return code


if __name__ == "__main__":
    sys.exit(cli.run(main))
