#!/usr/bin/env python3
"""Any local corpus -> token shards: bring your own text.

Inputs (files, directories searched recursively, or globs; read in sorted order):
  *.txt  [.gz|.zst]                 documents chosen by --doc-split (or --sources)
  *.jsonl / *.json  [.gz|.zst]      JSON lines; the document is --text-field
  *.parquet                          the document is column --text-field

Tokenizers: gpt2 (tiktoken), neox (GPT-NeoX-20B, HF tokenizers), llama2 (SentencePiece).
Every document is preceded by the delimiter token (<|endoftext|>, or <s> for llama2).

Val split (deterministic):
  --val-split head   the first --val-tokens tokens of the document stream are val,
                     llm.c style: <name>_val_000000.bin, then <name>_train_000001.bin ...
  --val-split hash   a document is val when a keyed hash of its text is below
                     --val-fraction: <name>_val_*.bin and <name>_train_*.bin
  --val-split none   train only

Examples:
  # the Gutenberg corpus, one document per book, PG boilerplate removed, CRLF -> LF
  python scripts/prepare_text.py ../shared/data/corpus/gutenberg-en-50mb/corpus.txt.gz \\
      --sources ../shared/data/corpus/gutenberg-en-50mb/sources.jsonl \\
      --strip-gutenberg --normalize-newlines --name gutenberg --tokenizer gpt2
  # JSON lines with Dolma/C4 records, NeoX tokenizer, 0.5% of documents as val
  python scripts/prepare_text.py 'corpus/*.jsonl.gz' --name web --tokenizer neox \\
      --val-split hash --val-fraction 0.005
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from vp_data import DataError, cli, tokenizer  # noqa: E402
from vp_data.pipeline import Job, Source, StreamSpec, check_dataset_name  # noqa: E402
from vp_data.readers import (  # noqa: E402
    SPLIT_MODES,
    base_name,
    detect_format,
    expand_inputs,
    load_sources,
    read_jsonl,
    read_parquet,
    read_ranges,
    read_text,
)


def doc_reader(path, fmt, args, ranges):
    """A function bad -> iterator of Docs for one input file."""
    if fmt == "jsonl":
        return lambda bad: read_jsonl(path, bad, text_field=args.text_field)
    if fmt == "parquet":
        return lambda bad: read_parquet(path, bad, text_field=args.text_field)
    if ranges is not None:
        return lambda bad: read_ranges(path, ranges, bad)
    return lambda bad: read_text(path, bad, split=args.doc_split, normalize_newlines=args.normalize_newlines)


def chain(openers):
    def open_all(bad):
        for op in openers:
            yield from op(bad)

    return open_all


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="input files, directories or globs")
    ap.add_argument("--name", help="shard name prefix (default: the first input's name without suffixes)")
    ap.add_argument("--format", choices=("auto", "txt", "jsonl", "parquet"), default="auto",
                    help="input format (default: from each file name)")
    ap.add_argument("--text-field", default="text", help="JSON/Parquet field holding the document (default text; "
                    "a.b for nested)")
    ap.add_argument("--doc-split", choices=SPLIT_MODES, default="file",
                    help="text files: one document per file (default), per blank-line section, per line, or per "
                    "<|endoftext|>-separated piece")
    ap.add_argument("--sources", help="text input: a JSON-lines index with offset/length byte ranges (of the "
                    "uncompressed file), one document per range, e.g. gutenberg-en-50mb/sources.jsonl")
    ap.add_argument("--strip-gutenberg", action="store_true",
                    help="remove Project Gutenberg headers/footers (text outside *** START/END OF ... ***)")
    ap.add_argument("--normalize-newlines", action="store_true", help="convert CRLF and CR line endings to LF")
    ap.add_argument("--val-split", choices=("head", "hash", "none"), default="head",
                    help="how to pick val (default head)")
    ap.add_argument("--val-tokens", type=cli.head_tokens_arg, default=1_048_576,
                    help="--val-split head: number of val tokens (default 1,048,576)")
    ap.add_argument("--val-fraction", type=cli.fraction, default=0.005,
                    help="--val-split hash: fraction of documents for val (default 0.005)")
    ap.add_argument("--seed", type=cli.integer, default=2357, help="key of the --val-split hash (default 2357)")
    ap.add_argument("--max-tokens", type=cli.positive_int,
                    help="stop after about this many tokens (whole documents; train only with --val-split hash)")
    cli.add_common_args(ap, out_dir="data/<name>", tokenizer="gpt2", shard_size=100_000_000)
    args = ap.parse_args(argv)

    files = expand_inputs(args.inputs)
    name = args.name or cli.slug(base_name(files[0]).split(".")[0])
    check_dataset_name(name)  # before any download (Job checks it too)
    out_dir = args.out_dir or os.path.join("data", name)
    fmts = [detect_format(f) if args.format == "auto" else args.format for f in files]
    ranges = None
    if args.sources:
        if len(files) != 1 or fmts[0] != "txt":
            raise DataError("--sources needs exactly one text input file (the file the byte ranges index)")
        ranges = load_sources(args.sources)
    spec = tokenizer.resolve(args.tokenizer, args.tokenizer_path)

    quota = {"*": args.max_tokens} if args.max_tokens else None
    if args.val_split == "hash":
        def factory(sname):
            return StreamSpec(sname, sname, quota=quota if sname == "train" else None)

        def route(doc):
            return "val" if cli.hash01(doc.text, args.seed) < args.val_fraction else "train"
    else:
        head = args.val_tokens if args.val_split == "head" else 0

        def factory(sname):
            return StreamSpec(sname, "train", head_tokens=head, head_split="val", quota=quota)

        def route(doc):
            return "main"

    config = {
        "script": "text",
        "inputs": cli.files_identity(files),
        "formats": fmts,
        "text_field": args.text_field,
        "doc_split": args.doc_split,
        "sources": cli.file_identity(args.sources) if args.sources else None,
        "val": {"split": args.val_split, "tokens": args.val_tokens, "fraction": args.val_fraction, "seed": args.seed},
        "max_tokens": args.max_tokens,
        "name": name,
    }
    job = Job(
        out_dir=out_dir,
        prefix=name,
        tokenizer=spec,
        config=config,
        stream_factory=factory,
        strip_gutenberg=args.strip_gutenberg,
        normalize_newlines=args.normalize_newlines,
        **cli.job_kwargs(args),
    )
    source = Source(
        name=name,
        open=chain([doc_reader(f, fmt, args, ranges) for f, fmt in zip(files, fmts)]),
        route=route,
        # With --max-tokens, stop reading once the budgeted stream is full.
        targets=["train" if args.val_split == "hash" else "main"],
    )
    code = job.run([source])
    if code == 0 and args.val_split == "head":
        cli.warn_if_all_val(job, args.val_tokens, "lower --val-tokens or use --val-split hash")
    if code == 0 and args.val_split == "hash" and args.val_fraction > 0:
        cli.warn_if_no_val(job, "raise --val-fraction or use --val-split head")
    return code


if __name__ == "__main__":
    sys.exit(cli.run(main))
