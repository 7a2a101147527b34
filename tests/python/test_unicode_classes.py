"""host/unicode_classes.h is what scripts/gen_unicode_classes.py generates from the `regex` module
(the class tables of the C++ prompt encoder's GPT-2 pre-tokenizer): a stale header fails here."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_unicode_classes_header_is_current():
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_unicode_classes.py"), "--check"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
