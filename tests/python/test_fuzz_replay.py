"""build/fuzz/replay (fuzz.mk, dev/fuzz/fuzz_inputs.cpp): one binary of the five fuzz targets,
which make test runs as its links build/fuzz/replay_<target> on the committed corpus. Here: the
target comes from the link's name or the first argument, and nothing else is taken for one; a
path that does not open is an error, not an empty input; and --make-seeds still writes, byte for
byte, the seeds committed under dev/fuzz/corpus/ for the targets whose seeds are built from
constants (the checkpoint target's are trained checkpoints, whose run text has changed since)."""
import subprocess

import pytest

from test_trainer_cli import REPO

REPLAY = REPO / "build" / "fuzz" / "replay"
CORPUS = REPO / "dev" / "fuzz" / "corpus"


def replay(*args, binary=REPLAY):
    if not REPLAY.exists():
        pytest.fail(f"{REPLAY} is missing: make build/fuzz/replay_checkpoint (make test builds it)")
    return subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_the_target_comes_from_the_link_or_the_first_argument(tmp_path):
    link = tmp_path / "replay_shard"
    link.symlink_to(REPLAY)
    by_link = replay(CORPUS / "shard", binary=link)
    by_arg = replay("shard", CORPUS / "shard")
    n = len(list((CORPUS / "shard").iterdir()))
    for p in (by_link, by_arg):
        assert p.returncode == 0 and f"{n} passed, 0 failed" in p.stderr, p.stderr[-2000:]
    for args in ([], ["nope", CORPUS / "shard"], [CORPUS / "shard"]):
        p = replay(*args)
        assert p.returncode == 2 and "TARGET one of checkpoint, shard, tokenizer, flags, mc" in p.stderr, (args, p.stderr[-2000:])
    other = tmp_path / "replay_nope"
    other.symlink_to(REPLAY)
    p = replay(CORPUS / "shard", binary=other)
    assert p.returncode == 2 and "usage:" in p.stderr, p.stderr[-2000:]


def test_a_path_that_does_not_open_is_an_error(tmp_path):
    p = replay("mc", tmp_path / "missing")
    assert p.returncode == 1 and "cannot replay" in p.stderr and "missing" in p.stderr, p.stderr[-2000:]


@pytest.mark.parametrize("target", ["shard", "tokenizer", "flags", "mc"])
def test_make_seeds_writes_the_committed_seeds(tmp_path, target):
    out = tmp_path / "seeds"
    p = replay(target, "--make-seeds", out)
    assert p.returncode == 0, p.stderr[-2000:]
    seeds = sorted(out.iterdir())
    assert seeds, "no seed written"
    for s in seeds:
        committed = CORPUS / target / s.name
        assert committed.exists() and committed.read_bytes() == s.read_bytes(), f"{target} seed {s.name} differs from {committed}"
