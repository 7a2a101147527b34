#!/usr/bin/env python3
"""The Pile -> GPT-NeoX-20B token shards (the Depth-Attention setup).

The Depth-Attention paper trains its Qwen3-style decoders on the Pile (32B tokens) with a
50,304-entry vocabulary, BOS/EOS id 0 and padding id 1: the GPT-NeoX-20B tokenizer (50,277 ids),
padded to a multiple of 128 as valuepath does.

Input: the Pile's own layout, JSON lines compressed with zstd, one record per line:
  {"text": "...", "meta": {"pile_set_name": "Pile-CC"}}
as train/00.jsonl.zst .. train/29.jsonl.zst, val.jsonl.zst and test.jsonl.zst (the test split is
never read). Either
  --input-dir DIR   a local copy of that tree (or any directory of .jsonl[.zst|.gz] / .parquet
                    files; files under a `train` directory or named train*/val*, form the splits)
  --repo OWNER/NAME download from the HF hub (default monology/pile-uncopyrighted, the Pile
                    without its copyrighted parts: Books3, BookCorpus2, OpenSubtitles and
                    YoutubeSubtitles; the original release is no longer distributed) into
                    $VALUEPATH_CACHE/pile/OWNER/NAME/, one file at a time (each train file is
                    about 15 GB compressed) and only as many as the budget needs. Offline, only
                    files already in the cache are used.

Tokenizer: GPT-NeoX-20B, HF `tokenizers`, tokenizer.json, 50,277 ids -> uint16 shards;
<|endoftext|> (id 0) before every document.

Sub-sampling: --budget N takes the first N tokens in file order (the Pile's files are already
shuffled across domains, so that is the natural mix); --mix 'pilecc=0.5,arxiv=0.5' takes, per
domain, the first documents until the domain has budget x weight tokens. Without --budget every
document of the selected files is used.

Val: one set of the first --val-tokens tokens (default 10M) of the Pile's val.jsonl.zst, the
split the paper reports perplexity on; --val-by-domain 1 writes one set per domain instead
(the first --val-tokens of each), for the trainer's per-domain val losses:
  data/pile/pile_train_000000.bin ...
  data/pile/pile_val_000000.bin                --val-data 'data/pile/pile_val_*.bin'
  data/pile/pile_val_arxiv_000000.bin, ...     --val-data arxiv='data/pile/pile_val_arxiv_*.bin' ...
If the input has no validation split, val documents are drawn from the train files by a keyed
hash of the text (--val-fraction).

Domains (--mix and --domains names, and the per-domain val set names):
  pilecc pubmedcentral books3 openwebtext2 arxiv github freelaw stackexchange uspto
  pubmedabstracts gutenberg opensubtitles wikipedia dmmathematics ubuntuirc bookcorpus2
  europarl hackernews youtubesubtitles philpapers nihexporter enron

Examples:
  python scripts/prepare_pile.py --budget 32e9                    # the paper's 32B tokens
  python scripts/prepare_pile.py --budget 1e9 --max-train-files 1 # a first billion, one file
  python scripts/prepare_pile.py --input-dir /data/pile --val-by-domain 1
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from vp_data import cli, domains  # noqa: E402

PILE = domains.Corpus(
    name="pile",
    title="Pile",
    default_repo="monology/pile-uncopyrighted",
    domain_field="meta.pile_set_name",
    # The 22 components of the Pile (Gao et al. 2020, Table 1) as their records name them.
    domains={
        "pilecc": "Pile-CC",
        "pubmedcentral": "PubMed Central",
        "books3": "Books3",
        "openwebtext2": "OpenWebText2",
        "arxiv": "ArXiv",
        "github": "Github",
        "freelaw": "FreeLaw",
        "stackexchange": "StackExchange",
        "uspto": "USPTO Backgrounds",
        "pubmedabstracts": "PubMed Abstracts",
        "gutenberg": "Gutenberg (PG-19)",
        "opensubtitles": "OpenSubtitles",
        "wikipedia": "Wikipedia (en)",
        "dmmathematics": "DM Mathematics",
        "ubuntuirc": "Ubuntu IRC",
        "bookcorpus2": "BookCorpus2",
        "europarl": "EuroParl",
        "hackernews": "HackerNews",
        "youtubesubtitles": "YoutubeSubtitles",
        "philpapers": "PhilPapers",
        "nihexporter": "NIH ExPorter",
        "enron": "Enron Emails",
    },
    default_mix="natural",
    val_by_domain=False,
    val_tokens=10_000_000,
)


def main(argv=None) -> int:
    return domains.main(PILE, __doc__, argv)


if __name__ == "__main__":
    sys.exit(cli.run(main))
