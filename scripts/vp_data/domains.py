"""Domain-tagged corpora (SlimPajama, the Pile, FineWeb) -> token shards, one val set per domain.

Both corpora are published the same way: JSON lines compressed with zstd, one document per line
with its source domain in a `meta` field ({"text": ..., "meta": {"redpajama_set_name": ...}} or
{"meta": {"pile_set_name": ...}}), split into train files and a validation split. A `Corpus`
says what differs (hub repo, domain field, domain names, mixes, defaults); `main` is the whole
script: files from a local tree or the HF hub (downloaded lazily into the cache, one file ahead of
the tokenizer), an optional token budget split by a domain mix, and val written per domain (or as
one set) from the validation split, or drawn from train by a keyed hash where there is none.
FineWeb publishes Parquet files instead, with the Common Crawl snapshot (`dump`) as its domain,
and its samples in subfolders of the repository (sample/10BT/...): `Corpus.subset`.
"""

import argparse
import hashlib
import os
import re
import threading
from dataclasses import dataclass, field

from . import DataError, cache, cli, tokenizer
from .pipeline import Job, Source, StreamSpec, split_name_problem
from .readers import base_name, detect_format, read_jsonl, read_parquet

# ("holdout" is not a split word: SlimPajama names both validation and test files example_holdout_N.)
SPLIT_WORDS = {"train": ("train",), "validation": ("validation", "valid", "val"), "test": ("test",)}
DATA_SUFFIXES = (".jsonl", ".json", ".parquet")


@dataclass(frozen=True)
class Corpus:
    name: str  # shard prefix, default out dir data/<name>, cache folder $VALUEPATH_CACHE/<name>/<repo>
    title: str  # for messages ("SlimPajama", "Pile")
    default_repo: str
    domain_field: str  # dotted record field holding the domain
    domains: dict  # short name (val set and --mix name) -> the domain field's value
    mixes: dict = field(default_factory=dict)  # --mix name -> {short name: weight}
    default_mix: str = "natural"  # --mix with --budget, when not given
    val_by_domain: bool = True  # default of --val-by-domain
    val_tokens: int = 1_000_000  # default of --val-tokens (per domain, or for the one val set)
    strip_prefix: str = ""  # dropped from unknown domain values to make their short name
    tokenizer: str = "neox"  # default of --tokenizer
    subset: str = ""  # default of --subset: the repository folder to read (FineWeb: sample/10BT); "" = all

    def short(self, value: str) -> str:
        """Val-set name of a domain value: letters and digits only (trainer --val-data NAME=)."""
        for k, v in self.domains.items():
            if v == value:
                return k
        return cli.slug(re.sub(f"^{re.escape(self.strip_prefix)}", "", value) if self.strip_prefix else value).replace("-", "")

    def full(self, name: str) -> str:
        if not self.domains:  # an open set (FineWeb's snapshots): the value as given
            return name
        if name in self.domains:
            return self.domains[name]
        if name in self.domains.values():
            return name
        raise DataError(f"unknown {self.title} domain {name!r}; use one of {', '.join(self.domains)}")

    def parse_mix(self, spec: str) -> dict | None:
        """-> {domain value: weight} (weights normalised), or None for the natural mix."""
        if spec == "natural":
            return None
        if spec in self.mixes:
            weights = self.mixes[spec]
        else:
            weights = {}
            for part in spec.split(","):
                try:
                    k, v = part.split("=")
                    weights[k.strip()] = float(v)
                except ValueError:
                    named = ", ".join(list(self.mixes) + ["natural"])
                    raise DataError(f"bad --mix {spec!r}: expected {named} or 'name=weight,...'") from None
        # a negative weight used to be dropped and the rest renormalised without a word
        odd = [f"{k}={v}" for k, v in weights.items() if not (v >= 0 and v != float("inf"))]
        if odd:
            raise DataError(f"--mix {spec!r}: weights must be finite and >= 0 (got {', '.join(odd)})")
        total = sum(weights.values())
        if total <= 0:
            raise DataError(f"--mix {spec!r}: weights must sum to > 0")
        return {self.full(k): v / total for k, v in weights.items() if v > 0}


def natural_key(path: str):
    """chunk2 before chunk10, example_train_9 before example_train_10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]


def split_of(relpath: str) -> str | None:
    """train / validation / test from a path: the first directory named like a split
    (SlimPajama: train/chunk1/..., validation/chunk3/...; the Pile: train/00.jsonl.zst), else a
    file name that starts with one (the Pile's val.jsonl.zst, test.jsonl.zst; HF Parquet
    conversions: data/train-00000-of-00048.parquet)."""
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
                continue  # the test split is kept out of training and model selection
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

    def __init__(self, corpus: Corpus, repo: str, subset: str = ""):
        self.repo = repo
        self.subset = subset.strip("/")
        self.root = cache.cache_path(corpus.name, *repo.split("/"))
        os.environ.setdefault("HF_HOME", cache.cache_path("hf"))
        if cache.offline():
            os.environ["HF_HUB_OFFLINE"] = "1"

    def listing(self) -> dict:
        """{"train": [...], "validation": [...]} paths relative to the repository. With a subset,
        only the files under it, and a file there without a split word is a train file."""
        if cache.offline():
            if not os.path.isdir(self.root):
                raise DataError(f"offline and nothing of {self.repo} is cached in {self.root}; {cache.NOT_SHARED_HINT}")
            if not self.subset:
                return local_files(self.root)
            base = os.path.join(self.root, self.subset)
            if not os.path.isdir(base):
                raise DataError(f"offline and {self.repo}'s --subset {self.subset} is not cached in {base}; "
                                f"{cache.NOT_SHARED_HINT}")
            found = local_files(base)
            return {k: [f"{self.subset}/{rel}" for rel in v] for k, v in found.items()}
        try:
            from huggingface_hub import HfApi

            names = HfApi().list_repo_files(self.repo, repo_type="dataset")
        except Exception as e:
            raise DataError(f"cannot list hub dataset {self.repo}: {type(e).__name__}: {e}") from None
        found = {"train": [], "validation": []}
        prefix = self.subset + "/" if self.subset else ""
        for n in names:
            if is_data_file(n) and n.startswith(prefix):
                s = split_of(n[len(prefix):]) or ("train" if prefix else None)
                if s in found:
                    found[s].append(n)
        for k in found:
            found[k].sort(key=natural_key)
        if not found["train"]:
            where = f" under {self.subset}/" if self.subset else ""
            raise DataError(f"hub dataset {self.repo} has no train .jsonl[.zst]/.parquet files{where}")
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
    the current one is being tokenized (downloads would otherwise leave the pool idle).

    The thread is a daemon that nobody waits for: once a budget is met the reader closes this
    generator, and the next file's download (2 GB for FineWeb) is abandoned rather than awaited,
    here or at interpreter exit (which a ThreadPoolExecutor's thread would hold up)."""

    def start(rel):
        box: dict = {}

        def work():
            try:
                box["path"] = locate(rel)
            except BaseException as e:  # handed to the consumer, which raises it
                box["error"] = e

        t = threading.Thread(target=work, name="prefetch", daemon=True)
        t.start()
        return t, box

    if not files:
        return
    job = start(files[0])
    for i in range(len(files)):
        t, box = job
        t.join()
        if "error" in box:
            raise box["error"]
        if i + 1 < len(files):
            job = start(files[i + 1])
        yield box["path"]


def files_digest(files: list, locate=None) -> dict:
    """Names (and, for local files, sizes) of the input files, as a count + sha256."""
    h = hashlib.sha256()
    for rel in files:
        h.update(rel.encode() + b"\0")
        if locate is not None:
            h.update(str(os.path.getsize(locate(rel))).encode() + b"\0")
    return {"count": len(files), "sha256": h.hexdigest()}


def add_args(ap: argparse.ArgumentParser, corpus: Corpus) -> None:
    src = ap.add_argument_group("input")
    src.add_argument("--input-dir", help=f"local {corpus.title} tree (default: download --repo into the cache)")
    src.add_argument("--repo", default=corpus.default_repo,
                     help=f"HF hub dataset to download from (default {corpus.default_repo})")
    if corpus.subset:
        src.add_argument("--subset", default=corpus.subset,
                         help=f"with --repo: the repository folder to read (default {corpus.subset})")
    src.add_argument("--max-train-files", type=cli.positive_int, help="use at most this many train files")
    src.add_argument("--max-val-files", type=cli.positive_int, help="use at most this many validation files")
    src.add_argument("--text-field", default="text", help="record field with the document (default text)")
    src.add_argument("--domain-field", default=corpus.domain_field,
                     help=f"record field with the domain (default {corpus.domain_field})")
    example = f", e.g. {next(iter(corpus.domains))}" if corpus.domains else ""
    src.add_argument("--default-domain", help="domain for records without --domain-field (default: such a record "
                     f"is a bad record){example}")
    mixes = ", ".join(list(corpus.mixes) + ["natural"])
    ap.add_argument("--budget", type=cli.positive_int, help="train tokens to take (e.g. 20e9); default: all")
    ap.add_argument("--mix", help=f"with --budget: {mixes} or 'name=weight,...' (default {corpus.default_mix})")
    ap.add_argument("--domains", help="comma-separated domains to keep (default: all, or the --mix ones)")
    ap.add_argument("--val-by-domain", type=int, choices=(0, 1), default=int(corpus.val_by_domain),
                    help=f"1 = one val set per domain, 0 = one val set (default {int(corpus.val_by_domain)})")
    ap.add_argument("--val-tokens", "--val-tokens-per-domain", dest="val_tokens", type=cli.nonneg_int,
                    default=corpus.val_tokens, help=f"val tokens per val set (default {corpus.val_tokens:,}; "
                    "0 = the whole validation split)")
    ap.add_argument("--val-fraction", type=cli.fraction, default=0.001,
                    help="only if the input has no validation split: fraction of train documents for val")
    ap.add_argument("--seed", type=cli.integer, default=2357, help="key of the --val-fraction hash")
    cli.add_common_args(ap, out_dir=f"data/{corpus.name}", tokenizer=corpus.tokenizer, shard_size=100_000_000)


def main(corpus: Corpus, doc: str, argv=None) -> int:
    """The whole preparation of `corpus`; `doc` is the script's --help text."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_args(ap, corpus)
    args = ap.parse_args(argv)

    if args.mix is not None and not args.budget:
        # a mix divides the --budget among domains; without one it used to be ignored silently
        ap.error("--mix needs --budget (the train tokens the mix divides among domains); add --budget N or "
                 "drop --mix")
    try:
        mix = corpus.parse_mix(args.mix or corpus.default_mix) if args.budget else None
    except DataError as e:  # a bad flag value: a usage error, as argparse's own
        ap.error(str(e))
    # an unknown domain name is a bad flag value: a usage error (exit 2) naming the valid ones
    def full_or_usage_error(flag, name):
        try:
            return corpus.full(name)
        except DataError as e:
            ap.error(f"argument {flag}: {e}")

    if args.domains:
        domains = [full_or_usage_error("--domains", d.strip()) for d in args.domains.split(",") if d.strip()]
    elif mix is not None:
        domains = sorted(mix)
    else:
        domains = None  # all
    if mix is not None and domains is not None:
        mix = {k: v for k, v in mix.items() if k in domains}
        if not mix:
            raise DataError("--domains leaves no domain of --mix")
    default_domain = full_or_usage_error("--default-domain", args.default_domain) if args.default_domain else None

    spec = tokenizer.resolve(args.tokenizer, args.tokenizer_path)
    if args.input_dir:
        listing = local_files(args.input_dir)
        root = os.path.abspath(args.input_dir)

        def locate(rel):
            return os.path.join(root, rel)

        input_name = {"dir": os.path.basename(root)}
    else:
        hub = HubFiles(corpus, args.repo, getattr(args, "subset", ""))
        listing = hub.listing()
        locate = hub.path
        input_name = {"repo": args.repo, **({"subset": hub.subset} if hub.subset else {})}
    train_files = listing["train"][: args.max_train_files] if args.max_train_files else listing["train"]
    val_files = listing["validation"][: args.max_val_files] if args.max_val_files else listing["validation"]
    hash_val = not val_files
    # A record's domain only matters to per-domain val sets, a --mix budget and a --domains filter;
    # otherwise any directory of Parquet/JSON lines works, with or without the domain field.
    key_required = default_domain is None and bool(args.val_by_domain or mix is not None or domains is not None)

    def open_files(files):
        def open_docs(bad):
            for path in prefetched(files, locate):  # lazily: a budget met early downloads less
                reader = read_parquet if detect_format(path) == "parquet" else read_jsonl
                for doc in reader(path, bad, text_field=args.text_field, key_field=args.domain_field,
                                  key_required=key_required):
                    if doc.key is None:
                        doc.key = default_domain
                    yield doc

        return open_docs

    def keep(doc) -> bool:
        return domains is None or doc.key in domains

    val_names: dict = {}  # domain value -> its val stream, checked once

    def val_stream(doc) -> str:
        if not args.val_by_domain:
            return "val"
        name = val_names.get(doc.key)
        if name is None:
            name = "val_" + corpus.short(doc.key)
            # Checked where a domain is first seen, before any tokenizing: a --domain-field that holds
            # the text makes a file name of kilobytes, which used to fail only at its first shard.
            problem = split_name_problem(corpus.name, name)
            if problem:
                shown = f"{doc.key[:40]!r}{'...' if len(doc.key) > 40 else ''} ({len(doc.key):,} characters)"
                raise DataError(f"--domain-field {args.domain_field}: the domain {shown} cannot name a per-domain "
                                f"val set ({problem}); pass the --domain-field that holds the domain, or "
                                f"--val-by-domain 0 for one val set")
            val_names[doc.key] = name
        return name

    train_quota = None
    if args.budget:
        train_quota = {"*": args.budget} if mix is None else {k: int(round(args.budget * w)) for k, w in mix.items()}
    val_quota = {"*": args.val_tokens} if args.val_tokens else None

    def factory(name):
        if name == "train":
            return StreamSpec(name, "train", quota=train_quota)
        return StreamSpec(name, name, quota=val_quota)

    if args.val_by_domain:
        known_val = [f"val_{corpus.short(d)}" for d in (domains or corpus.domains.values())]
    else:
        known_val = ["val"]
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
        # Val first: it is small, and its streams fill up early.
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
    val_config = {"hash_fraction": args.val_fraction if hash_val else None, "seed": args.seed}
    if args.val_by_domain:
        val_config["tokens_per_domain"] = args.val_tokens
    else:
        val_config["tokens"] = args.val_tokens
    job = Job(
        out_dir=args.out_dir,
        prefix=corpus.name,
        tokenizer=spec,
        config={
            "script": corpus.name,
            "input": input_name,
            # A digest, not the list: SlimPajama-627B's listing has ~59k names and the manifest
            # is rewritten after every shard.
            "train_files": files_digest(train_files, locate if args.input_dir else None),
            "val_files": files_digest(val_files, locate if args.input_dir else None),
            "fields": [args.text_field, args.domain_field, default_domain],
            "budget": args.budget,
            "train_quota": train_quota,
            "domains": domains,
            "val": val_config,
        },
        stream_factory=factory,
        progress_total=total,
        **cli.job_kwargs(args),
    )
    code = job.run(sources)
    if code == 0 and (val_files or args.val_fraction > 0):
        cli.warn_if_no_val(job, "raise --val-fraction" if hash_val else
                           "check that the validation files hold the --domains you keep")
    if code == 0:
        vals = [s for s in job.outputs() if s.startswith("val")]
        if args.val_by_domain and vals:
            flags = " ".join(f"--val-data {v[4:]}='{os.path.join(args.out_dir, f'{corpus.name}_{v}_*.bin')}'"
                             for v in vals)
            print(f"  per-domain val for the trainer: {flags}")
        elif vals:
            print(f"  val for the trainer: --val-data '{os.path.join(args.out_dir, f'{corpus.name}_val_*.bin')}'")
        if train_quota and mix is not None:
            s = job.streams.get("train")
            got = s.counts if s else {}
            short = [f"{corpus.short(k)} {got.get(k, 0):,}/{q:,}" for k, q in sorted(train_quota.items())]
            print("  train tokens per domain (got/budget): " + ", ".join(short))
    return code
