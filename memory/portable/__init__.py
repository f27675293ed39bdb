"""A person's data as one NDJSON stream: exported, and imported again (here or into
another Parley). The line format is `format.py`'s; erasing is memory.storage.erasure."""
