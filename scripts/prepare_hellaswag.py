#!/usr/bin/env python3
"""HellaSwag -> a multiple-choice file (.vpmc) for the trainer's --eval-mc.

Downloads the split's JSONL from the HellaSwag authors' repository into the cache
($VALUEPATH_CACHE/hellaswag/, looked in first; offline runs need it there) unless --input
names a local copy, tokenizes every example and writes

  data/hellaswag/hellaswag_val_gpt2.vpmc     (split and tokenizer in the name)
  data/hellaswag/hellaswag_val_gpt2.json     what was written, from what, with which settings

The trainer then scores it at every evaluation:

  ./train_cpu ... --eval-mc hellaswag=data/hellaswag/hellaswag_val_gpt2.vpmc

and logs mc_acc_hellaswag, mc_acc_norm_hellaswag and mc_acc_tokavg_hellaswag (host/mc_eval.h
says what each is). An example is a context and 4 endings, each following the context after a
space.

--render (how an example becomes text):
  llmc     (default) context = the record's "ctx", as llm.c's dev/data/hellaswag.py and
           build-nanogpt do; their GPT-2 124M figure is acc_tokavg.
  harness  context = "activity_label: ctx_a Ctx_b" and the WikiHow bracket markup removed,
           as lm-evaluation-harness's hellaswag task does; its figures are acc and acc_norm.
Tokens: with llmc and a BPE tokenizer (gpt2, neox) each ending is encoded on its own, " " + ending,
as llm.c does. Otherwise, as lm-evaluation-harness: context + " " + ending is encoded whole and
the ending's tokens are those after the context's own (SentencePiece would give a lone " " piece
to an ending encoded on its own). With --tokenizer llama2 the context starts with <s>, as Llama's
documents (and its shards here) do.

Example:  python scripts/prepare_hellaswag.py
          python scripts/prepare_hellaswag.py --tokenizer neox --render harness --limit 1000
"""

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from vp_data import DataError, cache, cli, mc, tokenizer  # noqa: E402
from vp_data.shards import write_atomic  # noqa: E402


def harness_clean(text: str) -> str:
    """lm-evaluation-harness's cleanup of HellaSwag text: WikiHow's " [title]" becomes a sentence
    break, any other [bracketed] markup goes, double spaces become one."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def render(record: dict, style: str):
    """(context text, [ending texts]) of one record."""
    if style == "llmc":
        return record["ctx"], list(record["endings"])
    ctx = record["ctx_a"] + " " + record["ctx_b"].capitalize()
    return harness_clean(record["activity_label"] + ": " + ctx), [harness_clean(e) for e in record["endings"]]


def whole_number(x):
    """A label as an int: a JSON integer, or one written as a string ("2", as HF's copy has it);
    None for anything else. int() alone read 1.9 as 1 and true as 1: another ending than the
    record's, scored without a word."""
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    if isinstance(x, float):
        return int(x) if x.is_integer() else None
    if isinstance(x, str) and re.fullmatch(r"\s*[0-9]+\s*", x):
        return int(x)
    return None


def read_records(path: str, limit):
    """The split's records, checked: a damaged line is an error naming the line."""
    records = []
    try:
        # bytes, decoded line by line: a damaged byte is then an error naming its line, not a
        # UnicodeDecodeError from the middle of the file iterator
        f = open(path, "rb")
    except OSError as e:
        raise DataError(f"cannot open {path}: {e.strerror}") from None
    with f:
        for n, raw in enumerate(f, 1):
            if limit is not None and len(records) >= limit:
                break
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{n}: invalid UTF-8 at byte {e.start} of the line; delete the file from "
                                f"the cache and re-run to fetch it again") from None
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except ValueError as e:
                raise DataError(f"{path}:{n}: not JSON ({e}); delete the file from the cache and re-run to fetch it again") from None
            except RecursionError:  # valid JSON nested thousands of levels deep: no HellaSwag record is
                raise DataError(f"{path}:{n}: JSON nested too deeply to read; not a HellaSwag record") from None
            need = ("ctx", "ctx_a", "ctx_b", "activity_label", "endings", "label")
            missing = [k for k in need if k not in r] if isinstance(r, dict) else list(need)
            if missing:
                raise DataError(f"{path}:{n}: not a HellaSwag record (missing {', '.join(missing)})")
            # both renderings concatenate these: a null or a number would be a TypeError there
            for k in ("ctx", "ctx_a", "ctx_b", "activity_label"):
                if not isinstance(r[k], str):
                    raise DataError(f"{path}:{n}: {k!r} is {json.dumps(r[k])[:40]}, not a string; not a HellaSwag "
                                    f"record")
            if r["label"] == "" or r["label"] is None:
                raise DataError(f"{path}:{n}: no label (HellaSwag's test split has none; use --split val)")
            endings = r["endings"]
            if not isinstance(endings, list) or len(endings) < 2 or not all(isinstance(e, str) and e.strip() for e in endings):
                raise DataError(f"{path}:{n}: 'endings' must be 2 or more non-empty strings")
            label = whole_number(r["label"])
            if label is None:
                raise DataError(f"{path}:{n}: label {json.dumps(r['label'])[:40]} is not an integer (the index of the "
                                f"right ending); not a HellaSwag record")
            if not 0 <= label < len(endings):
                raise DataError(f"{path}:{n}: label {label} is not one of its {len(endings)} endings")
            r["label"] = label
            records.append(r)
    if not records:
        raise DataError(f"{path}: no records")
    return records


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", choices=("val", "train"), default="val", help="HellaSwag split (default val, 10,042 examples)")
    ap.add_argument("--input", help="a local hellaswag_SPLIT.jsonl instead of the cached/downloaded one")
    ap.add_argument("--render", choices=("llmc", "harness"), default="llmc", help="how an example becomes text (default llmc; see above)")
    ap.add_argument("--limit", type=cli.positive_int, help="the first N examples only")
    ap.add_argument("--tokenizer", type=cli.tokenizer_name, default="gpt2",
                    help="gpt2 | neox | llama2 (default gpt2): the model's")
    ap.add_argument("--tokenizer-path", help="tokenizer file or directory (default: the cache), as for the prepare_* scripts")
    ap.add_argument("--out-dir", default="data/hellaswag", help="where the .vpmc goes (default data/hellaswag)")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing file made with other inputs or flags (default: refuse)")
    ap.add_argument("--no-progress", action="store_true", help="accepted as by every prepare_* script (this one has no progress bar: it takes seconds)")
    args = ap.parse_args(argv)

    path = args.input or cache.fetch(f"hellaswag/hellaswag_{args.split}.jsonl")
    records = read_records(path, args.limit)
    spec = tokenizer.resolve(args.tokenizer, args.tokenizer_path)
    tok = tokenizer.build(spec)
    prefix = [tok.eot] if tok.name == "llama2" else []

    joint = args.render == "harness" or tok.name == "llama2"
    examples = []
    longest = 0
    for r in records:
        ctx, endings = render(r, args.render)
        own = tok.encode(ctx)
        ctx_ids = prefix + own
        if joint:
            end_ids = [tok.encode(ctx + " " + e)[len(own):] for e in endings]
        else:
            end_ids = [tok.encode(" " + e) for e in endings]
        if not ctx_ids or any(not e for e in end_ids):
            raise DataError(f"{path}: record {r.get('ind', '?')} renders to an empty context or ending")
        longest = max(longest, max(len(ctx_ids) + len(e) for e in end_ids))
        examples.append(mc.McExample([int(i) for i in ctx_ids], [[int(i) for i in e] for e in end_ids], [len(e) for e in endings], r["label"]))

    os.makedirs(args.out_dir, exist_ok=True)
    stem = os.path.join(args.out_dir, f"hellaswag_{args.split}_{tok.name}")
    out, manifest_path = stem + ".vpmc", stem + ".json"
    data = mc.encode(examples, tok.vocab_size, tok.name)
    manifest = {
        "script": "hellaswag",
        "split": args.split,
        "input": cli.file_identity(path),
        "render": args.render,
        "limit": args.limit,
        "tokenizer": spec.fingerprint(),
        "examples": len(examples),
        "longest_row_tokens": longest,
        "vpmc_bytes": len(data),
    }
    if os.path.exists(out):
        with open(out, "rb") as f:
            same = f.read() == data
        if not same and not args.overwrite:
            raise DataError(f"{out} exists and was made from other inputs or flags; pass --overwrite to replace it, or choose another --out-dir")
    write_atomic(out, [data], len(data))
    manifest_bytes = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8")
    write_atomic(manifest_path, [manifest_bytes], len(manifest_bytes))
    print(f"{out}: {len(examples):,} examples ({args.split}, render {args.render}, tokenizer {tok.name}); "
          f"the longest context + ending is {longest} tokens (rows longer than --seq-len + 1 are cut from the left)")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
