#!/usr/bin/env python3
"""SlimPajama -> GPT-NeoX-20B token shards with per-domain val (the ResFormer setup).

Input: SlimPajama's native chunks, JSON lines compressed with zstd, one record per line:
  {"text": "...", "meta": {"redpajama_set_name": "RedPajamaArXiv"}}
laid out as train/chunk1..10/example_train_N.jsonl.zst and
validation/chunk1..5/example_holdout_N.jsonl.zst. Either
  --input-dir DIR   a local copy of that tree (or any directory of .jsonl[.zst|.gz] /
                    .parquet files; files under a `train`/`validation` path part, or named
                    train-*/validation-*, form the splits), or
  --repo OWNER/NAME download from the HF hub (default cerebras/SlimPajama-627B; smaller
                    public subsets with the same records work too, as .jsonl.zst or as
                    Parquet with a text column and a meta struct, e.g. data/train-*.parquet
                    + data/validation-*.parquet) into $VALUEPATH_CACHE/slimpajama/OWNER/NAME/,
                    one file at a time and only as many as the budget needs. Offline, only
                    files already in the cache are used.

Tokenizer: GPT-NeoX-20B (RedPajama-INCITE's), HF `tokenizers`, tokenizer.json, 50277 ids ->
uint16 shards; <|endoftext|> (id 0) before every document.

Sub-sampling: --budget N --mix resformer takes, per domain, the first documents (in file
order) until the domain has budget x weight tokens: ResFormer's 20B mix is
  commoncrawl 50%, c4 20%, github 10%, book 5%, arxiv 5%, wikipedia 5%, stackexchange 5%
(Value-Residual-Learning src_data/README.md: 10B/4B/2B/1B/1B/1B/1B). --mix natural takes
the first N tokens whatever their domain; --mix 'c4=0.5,arxiv=0.5' sets custom weights.
Without --budget every document of the selected files is used.

Val: written per domain from SlimPajama's validation split (the first --val-tokens tokens of
each domain, default 1M; 0 = all), so the trainer can report per-domain val loss (ResFormer
Table 5); --val-by-domain 0 writes one val set instead:
  data/slimpajama/slimpajama_train_000000.bin ...
  data/slimpajama/slimpajama_val_arxiv_000000.bin, slimpajama_val_c4_000000.bin, ...
  --val-data arxiv='data/slimpajama/slimpajama_val_arxiv_*.bin' --val-data c4=...
If the input has no validation split, val documents are drawn from the train files by a
keyed hash of the text (--val-fraction).

Examples:
  python scripts/prepare_slimpajama.py --budget 20e9 --mix resformer
  python scripts/prepare_slimpajama.py --input-dir /data/SlimPajama-627B --budget 1e9 --mix resformer
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from vp_data import cli, domains  # noqa: E402

SLIMPAJAMA = domains.Corpus(
    name="slimpajama",
    title="SlimPajama",
    default_repo="cerebras/SlimPajama-627B",
    domain_field="meta.redpajama_set_name",
    domains={
        "commoncrawl": "RedPajamaCommonCrawl",
        "c4": "RedPajamaC4",
        "github": "RedPajamaGithub",
        "book": "RedPajamaBook",
        "arxiv": "RedPajamaArXiv",
        "wikipedia": "RedPajamaWikipedia",
        "stackexchange": "RedPajamaStackExchange",
    },
    mixes={
        # ResFormer (Zhou et al., "Value Residual Learning"), Table 2 / src_data/README.md.
        "resformer": {"commoncrawl": 0.50, "c4": 0.20, "github": 0.10, "book": 0.05, "arxiv": 0.05,
                      "wikipedia": 0.05, "stackexchange": 0.05},
    },
    default_mix="resformer",
    val_by_domain=True,
    val_tokens=1_000_000,
    strip_prefix="RedPajama",
)


def main(argv=None) -> int:
    return domains.main(SLIMPAJAMA, __doc__, argv)


if __name__ == "__main__":
    sys.exit(cli.run(main))
