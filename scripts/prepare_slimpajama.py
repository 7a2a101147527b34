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

Val: written per domain from SlimPajama's validation split (first --val-tokens-per-domain
tokens of each domain, default 1M; 0 = all), so the trainer can report per-domain val loss
(ResFormer Table 5):
  data/slimpajama/slimpajama_train_000000.bin ...
  data/slimpajama/slimpajama_val_arxiv_000000.bin, slimpajama_val_c4_000000.bin, ...
  --val-data arxiv='data/slimpajama/slimpajama_val_arxiv_*.bin' --val-data c4=...
If the input has no validation split, val documents are drawn from the train files by a
keyed hash of the text (--val-fraction).

Examples:
  python scripts/prepare_slimpajama.py --budget 20e9 --mix resformer
  python scripts/prepare_slimpajama.py --input-dir /data/SlimPajama-627B --budget 1e9 --mix resformer
"""

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from vp_data import DataError, cache, cli, tokenizer  # noqa: E402
from vp_data.pipeline import Job, Source, StreamSpec  # noqa: E402
from vp_data.readers import base_name, detect_format, read_jsonl, read_parquet  # noqa: E402

DEFAULT_REPO = "cerebras/SlimPajama-627B"
SET_NAMES = {
    "commoncrawl": "RedPajamaCommonCrawl",
    "c4": "RedPajamaC4",
    "github": "RedPajamaGithub",
    "book": "RedPajamaBook",
    "arxiv": "RedPajamaArXiv",
    "wikipedia": "RedPajamaWikipedia",
    "stackexchange": "RedPajamaStackExchange",
}
SHORT = {v: k for k, v in SET_NAMES.items()}
MIXES = {
    # ResFormer (Zhou et al., "Value Residual Learning"), Table 2 / src_data/README.md.
    "resformer": {"commoncrawl": 0.50, "c4": 0.20, "github": 0.10, "book": 0.05, "arxiv": 0.05,
                  "wikipedia": 0.05, "stackexchange": 0.05},
}
# ("holdout" is not a split word: SlimPajama names both validation and test files example_holdout_N.)
SPLIT_WORDS = {"train": ("train",), "validation": ("validation", "valid", "val"), "test": ("test",)}
DATA_SUFFIXES = (".jsonl", ".json", ".parquet")


def short_name(set_name: str) -> str:
    return SHORT.get(set_name) or cli.slug(re.sub(r"^RedPajama", "", set_name)).replace("-", "")


def full_name(name: str) -> str:
    if name in SET_NAMES:
        return SET_NAMES[name]
    if name in SHORT:
        return name
    raise DataError(f"unknown SlimPajama domain {name!r}; use one of {', '.join(SET_NAMES)}")


def parse_mix(spec: str) -> dict | None:
    """-> {RedPajamaSetName: weight} (weights normalised), or None for the natural mix."""
    if spec == "natural":
        return None
    if spec in MIXES:
        weights = MIXES[spec]
    else:
        weights = {}
        for part in spec.split(","):
            try:
                k, v = part.split("=")
                weights[k.strip()] = float(v)
            except ValueError:
                raise DataError(f"bad --mix {spec!r}: expected resformer, natural or 'name=weight,...'") from None
    total = sum(weights.values())
    if total <= 0:
        raise DataError(f"--mix {spec!r}: weights must sum to > 0")
    return {full_name(k): v / total for k, v in weights.items() if v > 0}


def natural_key(path: str):
    """chunk2 before chunk10, example_train_9 before example_train_10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]


def split_of(relpath: str) -> str | None:
    """train / validation / test from a path: the first directory named like a split
    (SlimPajama: train/chunk1/..., validation/chunk3/..., test/...), else a file name that
    starts with one (HF Parquet conversions: data/train-00000-of-00048.parquet)."""
    parts = relpath.replace("\\", "/").lower().split("/")
    for p in parts[:-1]:
        for split, words in SPLIT_WORDS.items():
            if p in words:
                return split
    for split, words in SPLIT_WORDS.items():
        if any(re.match(rf"(?:example_)?{w}[-_.]", parts[-1]) for w in words):
            return split
    return None


def is_data_file(path: str) -> bool:
    return base_name(path).lower().endswith(DATA_SUFFIXES)


def local_files(root: str) -> dict:
    if not os.path.isdir(root):
        raise DataError(f"--input-dir {root} is not a directory")
    found = {"train": [], "validation": [], "other": []}
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        for f in files:
            p = os.path.join(dirpath, f)
            if not is_data_file(p):
                continue
            rel = os.path.relpath(p, root)
            s = split_of(rel)
            if s == "test":
                continue  # SlimPajama's test split is not used
            found[s or "other"].append(rel)
    for k in found:
        found[k].sort(key=natural_key)
    if not found["train"] and found["other"]:
        found["train"], found["other"] = found["other"], []
    if not found["train"] and not found["validation"]:
        raise DataError(f"no .jsonl[.zst|.gz] or .parquet files under {root}")
    return found


class HubFiles:
    """Lists a hub dataset repo once and downloads its files lazily into the cache."""

    def __init__(self, repo: str):
        self.repo = repo
        self.root = cache.cache_path("slimpajama", *repo.split("/"))
        os.environ.setdefault("HF_HOME", cache.cache_path("hf"))
        if cache.offline():
            os.environ["HF_HUB_OFFLINE"] = "1"

    def listing(self) -> dict:
        if cache.offline():
            if not os.path.isdir(self.root):
                raise DataError(f"offline and nothing of {self.repo} is cached in {self.root}; {cache.FILL_HINT}")
            return local_files(self.root)
        try:
            from huggingface_hub import HfApi

            names = HfApi().list_repo_files(self.repo, repo_type="dataset")
        except Exception as e:
            raise DataError(f"cannot list hub dataset {self.repo}: {type(e).__name__}: {e}") from None
        found = {"train": [], "validation": []}
        for n in names:
            if is_data_file(n):
                s = split_of(n)
                if s in found:
                    found[s].append(n)
        for k in found:
            found[k].sort(key=natural_key)
        if not found["train"]:
            raise DataError(f"hub dataset {self.repo} has no train .jsonl[.zst]/.parquet files")
        return found

    def path(self, rel: str) -> str:
        local = os.path.join(self.root, rel)
        if os.path.exists(local):
            return local
        if cache.offline():
            raise DataError(f"{local} is not cached and we are offline")
        try:
            from huggingface_hub import hf_hub_download

            return hf_hub_download(self.repo, rel, repo_type="dataset", local_dir=self.root)
        except Exception as e:
            raise DataError(f"cannot download {rel} from {self.repo}: {type(e).__name__}: {e}") from None


def prefetched(files: list, locate):
    """Yield locate(f) for each file, fetching the next file in a background thread while
    the current one is being tokenized (downloads would otherwise leave the pool idle)."""
    from concurrent.futures import ThreadPoolExecutor

    if not files:
        return
    with ThreadPoolExecutor(max_workers=1) as ex:
        fut = ex.submit(locate, files[0])
        for i in range(len(files)):
            path = fut.result()
            if i + 1 < len(files):
                fut = ex.submit(locate, files[i + 1])
            yield path


def files_digest(files: list, locate=None) -> dict:
    """Names (and, for local files, sizes) of the input files, as a count + sha256."""
    import hashlib

    h = hashlib.sha256()
    for rel in files:
        h.update(rel.encode() + b"\0")
        if locate is not None:
            h.update(str(os.path.getsize(locate(rel))).encode() + b"\0")
    return {"count": len(files), "sha256": h.hexdigest()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_argument_group("input")
    src.add_argument("--input-dir", help="local SlimPajama tree (default: download --repo into the cache)")
    src.add_argument("--repo", default=DEFAULT_REPO, help=f"HF hub dataset to download from (default {DEFAULT_REPO})")
    src.add_argument("--max-train-files", type=cli.positive_int, help="use at most this many train files")
    src.add_argument("--max-val-files", type=cli.positive_int, help="use at most this many validation files")
    src.add_argument("--text-field", default="text", help="record field with the document (default text)")
    src.add_argument("--domain-field", default="meta.redpajama_set_name",
                     help="record field with the domain (default meta.redpajama_set_name)")
    src.add_argument("--default-domain", help="domain for records without --domain-field (default: such a record "
                     "is a bad record), e.g. RedPajamaArXiv for RedPajama-1T's arxiv files")
    ap.add_argument("--budget", type=cli.positive_int, help="train tokens to take (e.g. 20e9); default: all")
    ap.add_argument("--mix", default="resformer",
                    help="with --budget: resformer (default), natural, or 'commoncrawl=0.5,c4=0.2,...'")
    ap.add_argument("--domains", help="comma-separated domains to keep (default: all seven, or the --mix ones)")
    ap.add_argument("--val-tokens-per-domain", type=cli.nonneg_int, default=1_000_000,
                    help="val tokens per domain (default 1,000,000; 0 = the whole validation split)")
    ap.add_argument("--val-fraction", type=cli.fraction, default=0.001,
                    help="only if the input has no validation split: fraction of train documents for val")
    ap.add_argument("--seed", type=int, default=2357, help="key of the --val-fraction hash")
    cli.add_common_args(ap, out_dir="data/slimpajama", tokenizer="neox", shard_size=100_000_000)
    args = ap.parse_args(argv)

    mix = parse_mix(args.mix) if args.budget else None
    if args.domains:
        domains = [full_name(d.strip()) for d in args.domains.split(",") if d.strip()]
    elif mix is not None:
        domains = sorted(mix)
    else:
        domains = None  # all
    if mix is not None and domains is not None:
        mix = {k: v for k, v in mix.items() if k in domains}
        if not mix:
            raise DataError("--domains leaves no domain of --mix")
    default_domain = full_name(args.default_domain) if args.default_domain else None

    spec = tokenizer.resolve(args.tokenizer, args.tokenizer_path)
    if args.input_dir:
        listing = local_files(args.input_dir)
        root = os.path.abspath(args.input_dir)

        def locate(rel):
            return os.path.join(root, rel)

        input_name = {"dir": os.path.basename(root)}
    else:
        hub = HubFiles(args.repo)
        listing = hub.listing()
        locate = hub.path
        input_name = {"repo": args.repo}
    train_files = listing["train"][: args.max_train_files] if args.max_train_files else listing["train"]
    val_files = listing["validation"][: args.max_val_files] if args.max_val_files else listing["validation"]
    hash_val = not val_files

    def open_files(files):
        def open_docs(bad):
            for path in prefetched(files, locate):  # lazily: a budget met early downloads less
                reader = read_parquet if detect_format(path) == "parquet" else read_jsonl
                for doc in reader(path, bad, text_field=args.text_field, key_field=args.domain_field,
                                  key_required=default_domain is None):
                    if doc.key is None:
                        doc.key = default_domain
                    yield doc

        return open_docs

    def keep(doc) -> bool:
        return domains is None or doc.key in domains

    def val_stream(doc) -> str:
        return "val_" + short_name(doc.key)

    train_quota = None
    if args.budget:
        train_quota = {"*": args.budget} if mix is None else {k: int(round(args.budget * w)) for k, w in mix.items()}
    val_quota = {"*": args.val_tokens_per_domain} if args.val_tokens_per_domain else None

    def factory(name):
        if name == "train":
            return StreamSpec(name, "train", quota=train_quota)
        return StreamSpec(name, name, quota=val_quota)

    known_val = [f"val_{short_name(d)}" for d in (domains or SET_NAMES.values())]
    sources = []
    if hash_val:
        sources.append(Source(
            name="train+val(hash)",
            open=open_files(train_files),
            route=lambda d: None if not keep(d) else (
                val_stream(d) if cli.hash01(d.text, args.seed) < args.val_fraction else "train"),
            targets=["train"] + known_val if (train_quota and val_quota) else None,
        ))
    else:
        # Val first: it is small, and its per-domain streams fill up early.
        sources.append(Source(
            name="validation",
            open=open_files(val_files),
            route=lambda d: val_stream(d) if keep(d) else None,
            targets=known_val if val_quota else None,
        ))
        sources.append(Source(
            name="train",
            open=open_files(train_files),
            route=lambda d: "train" if keep(d) else None,
            targets=["train"] if train_quota else None,
        ))

    total = None
    if train_quota and val_quota:
        total = sum(train_quota.values()) + val_quota["*"] * len(known_val)
    job = Job(
        out_dir=args.out_dir,
        prefix="slimpajama",
        tokenizer=spec,
        config={
            "script": "slimpajama",
            "input": input_name,
            # A digest, not the list: the 627B listing has ~59k names and the manifest is
            # rewritten after every shard.
            "train_files": files_digest(train_files, locate if args.input_dir else None),
            "val_files": files_digest(val_files, locate if args.input_dir else None),
            "fields": [args.text_field, args.domain_field, default_domain],
            "budget": args.budget,
            "train_quota": train_quota,
            "domains": domains,
            "val": {"tokens_per_domain": args.val_tokens_per_domain, "hash_fraction": args.val_fraction if hash_val else None,
                    "seed": args.seed},
        },
        stream_factory=factory,
        progress_total=total,
        **cli.job_kwargs(args),
    )
    code = job.run(sources)
    if code == 0:
        vals = [s for s in job.outputs() if s.startswith("val_")]
        if vals:
            flags = " ".join(f"--val-data {v[4:]}='{os.path.join(args.out_dir, f'slimpajama_{v}_*.bin')}'" for v in vals)
            print(f"  per-domain val for the trainer: {flags}")
        if train_quota and mix is not None:
            s = job.streams.get("train")
            got = s.counts if s else {}
            short = [f"{short_name(k)} {got.get(k, 0):,}/{q:,}" for k, q in sorted(train_quota.items())]
            print("  train tokens per domain (got/budget): " + ", ".join(short))
    return code


if __name__ == "__main__":
    sys.exit(cli.run(main))
