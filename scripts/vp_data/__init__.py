"""valuepath data pipeline: tokenizers, shard writer/reader, input readers, driver.

The thin scripts `scripts/prepare_*.py` are built on this package; every dataset goes
through the same tokenizer module (`tokenizer.py`), the same shard writer
(`shards.py`) and the same multiprocessing driver (`pipeline.py`), so there is one
code path to test instead of one copy per dataset.
"""


class DataError(Exception):
    """A problem the user can fix (missing file, bad record, full disk, ...).

    Scripts catch it at the top level and print only the message (no traceback), so the
    message must name the file (and line/row) involved and what to do about it.
    """


__all__ = ["DataError"]
