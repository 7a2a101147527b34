#!/usr/bin/env python3
"""FineWeb / FineWeb-Edu -> GPT-2 token shards (llm.c's GPT-2 data; modded-nanogpt's too).

Input: the hub datasets' own layout, Parquet files of web documents with their Common Crawl
snapshot in a `dump` field ({"text": ..., "id": ..., "dump": "CC-MAIN-2024-10", "url": ...}).
The sampled subsets sit in their own folders: sample/10BT/000_00000.parquet, ... (10B GPT-2
tokens; also sample/100BT and sample/350BT). Either
  --input-dir DIR   a local copy of one subset's folder (or any directory of .parquet/.jsonl files)
  --repo OWNER/NAME download from the HF hub (default HuggingFaceFW/fineweb, llm.c's
                    "classic" choice; HuggingFaceFW/fineweb-edu for the educational filter) into
                    $VALUEPATH_CACHE/fineweb/OWNER/NAME/, the files of --subset (default
                    sample/10BT) one at a time and only as many as --budget needs (each is about
                    2 GB). Offline, only files already in the cache are used.

Tokenizer: GPT-2 by default (--tokenizer neox / llama2 work too); <|endoftext|> before every
document, as llm.c's dev/data/fineweb.py writes it.

Val: FineWeb has no validation split. A document is val when a keyed hash of its text is below
--val-fraction (default 0.001), up to --val-tokens (default 10M), so the split depends on neither
file order nor worker count. (llm.c takes the first 100M tokens instead; `--val-fraction 0.01
--val-tokens 1e8` gives a val set of that size.)
  data/fineweb/fineweb_train_000000.bin ...   --train-data 'data/fineweb/fineweb_train_*.bin'
  data/fineweb/fineweb_val_000000.bin         --val-data 'data/fineweb/fineweb_val_*.bin'
--val-by-domain 1 writes one val set per snapshot instead (named after the dump: ccmain202410).

Examples:
  python scripts/prepare_fineweb.py                                   # FineWeb sample-10BT, all of it
  python scripts/prepare_fineweb.py --budget 1e9                      # the first billion train tokens
  python scripts/prepare_fineweb.py --repo HuggingFaceFW/fineweb-edu --subset sample/100BT --budget 3e10
  python scripts/prepare_fineweb.py --input-dir /data/fineweb/sample/10BT
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from vp_data import cli, domains  # noqa: E402

FINEWEB = domains.Corpus(
    name="fineweb",
    title="FineWeb",
    default_repo="HuggingFaceFW/fineweb",
    domain_field="dump",
    domains={},  # the Common Crawl snapshots, an open set: each is named after its dump
    default_mix="natural",
    val_by_domain=False,
    val_tokens=10_000_000,
    tokenizer="gpt2",
    subset="sample/10BT",
)


def main(argv=None) -> int:
    return domains.main(FINEWEB, __doc__, argv)


if __name__ == "__main__":
    sys.exit(cli.run(main))
