"""prepare_hellaswag.py: HellaSwag records -> .vpmc, checked against the tokenizers' own encodings.

HellaSwag itself is not in ../shared/data, so the records here are written for these tests in
the dataset's schema (the fields of hellaswag_val.jsonl), one of them in its WikiHow markup; they
go into the test cache where the script looks first.
"""

import json
import os

import numpy as np
import pytest

from vp_data import DataError, mc

RECORDS = [
    {"ind": 4, "activity_label": "Rowing", "ctx_a": "A man sits in a narrow boat on a calm lake.",
     "ctx_b": "he", "ctx": "A man sits in a narrow boat on a calm lake. he",
     "endings": ["pulls the oars back and glides forward.", "eats a sandwich made of rope.",
                 "climbs into the sky with a ladder.", "paints the lake a bright red."],
     "label": 0, "split": "val", "split_type": "indomain", "source_id": "test~0"},
    {"ind": 9, "activity_label": "Home and Garden",
     "ctx_a": "[header] How to repot a fern [title] Pick a pot one size larger. [step] Fill it a third with soil.",
     "ctx_b": "then", "ctx": "[header] How to repot a fern [title] Pick a pot one size larger. [step] Fill it a third with soil. then",
     "endings": ["set the fern in and  press soil around the roots. [substeps] Water it well.",
                 "throw the pot at the fern.", "bury the fern under the old pot.", "leave the soil in the bag for a year."],
     "label": 0, "split": "val", "split_type": "zeroshot", "source_id": "test~1"},
    {"ind": 11, "activity_label": "Baking cookies", "ctx_a": "A child stirs dough in a bowl.", "ctx_b": "the child",
     "ctx": "A child stirs dough in a bowl. the child",
     "endings": ["flies the bowl to the moon.", "sings to the oven until it melts.",
                 "scoops the dough onto a tray and slides it into the oven.", "plants the spoon in the garden."],
     "label": 2, "split": "val", "split_type": "indomain", "source_id": "test~2"},
]


@pytest.fixture()
def hs_cache(vp_cache):
    """The records as the cache's hellaswag_val.jsonl (removed afterwards)."""
    path = os.path.join(vp_cache, "hellaswag", "hellaswag_val.jsonl")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in RECORDS:
            f.write(json.dumps(r) + "\n")
    yield path
    os.remove(path)


def test_llmc_render_matches_tiktoken(tmp_path, run_script, hs_cache, ref_gpt2):
    r = run_script("prepare_hellaswag", "--out-dir", tmp_path)
    assert "3 examples (val, render llmc, tokenizer gpt2)" in r.out
    examples, vocab, name = mc.read(str(tmp_path / "hellaswag_val_gpt2.vpmc"))
    assert (vocab, name, len(examples)) == (50257, "gpt2", 3)
    for ex, rec in zip(examples, RECORDS):
        assert ex.context == ref_gpt2.encode_ordinary(rec["ctx"])
        assert ex.endings == [ref_gpt2.encode_ordinary(" " + e) for e in rec["endings"]]
        assert ex.ending_chars == [len(e) for e in rec["endings"]]
        assert ex.label == rec["label"]
    manifest = json.loads((tmp_path / "hellaswag_val_gpt2.json").read_text())
    assert manifest["examples"] == 3 and manifest["render"] == "llmc" and manifest["split"] == "val"
    # the same inputs again: the same bytes, accepted without --overwrite
    before = (tmp_path / "hellaswag_val_gpt2.vpmc").read_bytes()
    run_script("prepare_hellaswag", "--out-dir", tmp_path)
    assert (tmp_path / "hellaswag_val_gpt2.vpmc").read_bytes() == before


def test_harness_render_cleans_wikihow_markup(tmp_path, run_script, hs_cache, ref_gpt2):
    """lm-evaluation-harness's text: "label: ctx_a Ctx_b", " [title]" as a sentence break, other
    [markup] gone, double spaces single; the endings cleaned the same way."""
    run_script("prepare_hellaswag", "--out-dir", tmp_path, "--render", "harness", "--limit", "2")
    examples, _, _ = mc.read(str(tmp_path / "hellaswag_val_gpt2.vpmc"))
    assert len(examples) == 2
    want_ctx = [
        "Rowing: A man sits in a narrow boat on a calm lake. He",
        "Home and Garden: How to repot a fern. Pick a pot one size larger. Fill it a third with soil. Then",
    ]
    want_first_ending = ["pulls the oars back and glides forward.", "set the fern in and press soil around the roots. Water it well."]
    for ex, ctx, end in zip(examples, want_ctx, want_first_ending):
        assert ex.context == ref_gpt2.encode_ordinary(ctx)
        # lm-evaluation-harness's split: the tokens of the whole after the context's own
        own = ref_gpt2.encode_ordinary(ctx)
        assert ex.endings[0] == ref_gpt2.encode_ordinary(ctx + " " + end)[len(own):]
        assert ex.ending_chars[0] == len(end)


def test_other_tokenizers(tmp_path, run_script, hs_cache, ref_neox, ref_llama2):
    """NeoX: no prefix, as GPT-2; Llama 2: the context starts with <s>, as its documents do."""
    run_script("prepare_hellaswag", "--out-dir", tmp_path, "--tokenizer", "neox")
    ex, vocab, name = mc.read(str(tmp_path / "hellaswag_val_neox.vpmc"))
    assert (vocab, name) == (50277, "neox")
    assert ex[0].context == ref_neox.encode(RECORDS[0]["ctx"], add_special_tokens=False).ids
    run_script("prepare_hellaswag", "--out-dir", tmp_path, "--tokenizer", "llama2")
    ex, vocab, name = mc.read(str(tmp_path / "hellaswag_val_llama2.vpmc"))
    assert (vocab, name) == (32000, "llama2")
    ctx, end = RECORDS[2]["ctx"], RECORDS[2]["endings"][1]
    assert ex[2].context == [ref_llama2.bos_id()] + ref_llama2.encode(ctx)
    # the ending's pieces as they come after the context, not with a lone "▁" of their own
    assert ex[2].endings[1] == ref_llama2.encode(ctx + " " + end)[len(ref_llama2.encode(ctx)):]
    assert ref_llama2.id_to_piece(ex[2].endings[1][0]).startswith("\u2581") and ref_llama2.id_to_piece(ex[2].endings[1][0]) != "\u2581"


def test_bad_inputs_are_clear_errors(tmp_path, run_script, hs_cache):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(RECORDS[0]) + "\n{not json\n")
    r = run_script("prepare_hellaswag", "--input", bad, "--out-dir", tmp_path, expect=1)
    assert "bad.jsonl:2: not JSON" in r.err
    test_split = dict(RECORDS[0], label="")
    bad.write_text(json.dumps(test_split) + "\n")
    r = run_script("prepare_hellaswag", "--input", bad, "--out-dir", tmp_path, expect=1)
    assert "no label" in r.err and "--split val" in r.err
    bad.write_text(json.dumps(dict(RECORDS[0], label=7)) + "\n")
    r = run_script("prepare_hellaswag", "--input", bad, "--out-dir", tmp_path, expect=1)
    assert "label 7 is not one of its 4 endings" in r.err
    bad.write_text(json.dumps({"ctx": "x"}) + "\n")
    r = run_script("prepare_hellaswag", "--input", bad, "--out-dir", tmp_path, expect=1)
    assert "not a HellaSwag record (missing ctx_a" in r.err
    # damaged files used to end in a traceback (UnicodeDecodeError, TypeError)
    bad.write_bytes(json.dumps(RECORDS[0]).encode() + b"\n" + json.dumps(RECORDS[0]).encode()[:30] + b"\xff\xfe\n")
    r = run_script("prepare_hellaswag", "--input", bad, "--out-dir", tmp_path, expect=1)
    assert "bad.jsonl:2: invalid UTF-8 at byte 30" in r.err and "Traceback" not in r.err
    bad.write_text(json.dumps(dict(RECORDS[0], ctx=None)) + "\n")
    r = run_script("prepare_hellaswag", "--input", bad, "--out-dir", tmp_path, expect=1)
    assert "bad.jsonl:1: 'ctx' is null, not a string" in r.err
    bad.write_text(json.dumps(dict(RECORDS[0], activity_label=5)) + "\n")
    r = run_script("prepare_hellaswag", "--input", bad, "--out-dir", tmp_path, "--render", "harness", expect=1)
    assert "bad.jsonl:1: 'activity_label' is 5, not a string" in r.err
    # the train split is not in the cache, and the tests are offline
    r = run_script("prepare_hellaswag", "--split", "train", "--out-dir", tmp_path, expect=1)
    assert "hellaswag_train.jsonl is not in the cache and we are offline" in r.err
    # a file made from other inputs is not replaced without --overwrite
    run_script("prepare_hellaswag", "--out-dir", tmp_path)
    before = (tmp_path / "hellaswag_val_gpt2.vpmc").read_bytes()
    r = run_script("prepare_hellaswag", "--out-dir", tmp_path, "--limit", "1", expect=1)
    assert "--overwrite" in r.err
    assert (tmp_path / "hellaswag_val_gpt2.vpmc").read_bytes() == before
    run_script("prepare_hellaswag", "--out-dir", tmp_path, "--limit", "1", "--overwrite")
    assert len(mc.read(str(tmp_path / "hellaswag_val_gpt2.vpmc"))[0]) == 1


def test_offline_hint_says_which_file_goes_where(tmp_path, run_script, vp_cache):
    """HellaSwag is not in ../shared/data: the hint names the file, its place in the cache and its
    URL, not fill_cache_from_shared.sh (which cannot fill it)."""
    r = run_script("prepare_hellaswag", "--split", "train", "--out-dir", tmp_path, expect=1)
    dest = os.path.join(vp_cache, "hellaswag", "hellaswag_train.jsonl")
    assert (f"or download https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_train.jsonl "
            f"to {dest} yourself") in r.err, r.err
    assert "../shared/data does not hold it" in r.err


def test_ending_chars_count_characters_not_bytes(tmp_path, run_script, ref_gpt2):
    """acc_norm divides by the ending's length in characters (docs/formats.md; lm-evaluation-harness
    takes len() of the str): an accented ending must not be counted in UTF-8 bytes. The counts
    are by hand: "sips a café crème." is 18 characters (20 bytes), "naïve plan." 11 (12)."""
    rec = dict(RECORDS[0], endings=["sips a café crème.", "naïve plan.", "rows home.", "sleeps."], label=1)
    src = tmp_path / "accents.jsonl"
    src.write_text(json.dumps(rec) + "\n", encoding="utf-8")
    run_script("prepare_hellaswag", "--input", src, "--out-dir", tmp_path)
    (ex,), _, _ = mc.read(str(tmp_path / "hellaswag_val_gpt2.vpmc"))
    assert ex.ending_chars == [18, 11, 10, 7]
    assert ex.endings[0] == ref_gpt2.encode_ordinary(" sips a café crème.") and ex.label == 1


def test_vpmc_byte_layout_by_hand(tmp_path):
    """mc.encode against the layout of docs/formats.md written out by hand, and a label outside
    0..n_choices-1 refused: the trainer would score the example against a choice it does not have."""
    ex = mc.McExample(context=[7], endings=[[8, 9], [5]], ending_chars=[3, 2], label=1)
    raw = mc.encode([ex], 50257, "gpt2")
    header = np.frombuffer(raw[:1024], "<i4")
    assert header[:5].tolist() == [20241125, 1, 1, 50257, 11] and not header[5:8].any() and not header[16:].any()
    assert raw[32:64] == b"gpt2" + bytes(28)
    # n_choices, label, context_len, (ending_len, ending_chars) x 2, context, ending 0, ending 1
    assert np.frombuffer(raw[1024:], "<i4").tolist() == [2, 1, 1, 2, 3, 1, 2, 7, 8, 9, 5]
    for bad in (2, -1):
        with pytest.raises(DataError, match="label"):
            mc.encode([mc.McExample([7], [[8, 9], [5]], [3, 2], bad)], 50257, "gpt2")
