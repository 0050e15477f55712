import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def pytest_configure(config) -> None:  # type: ignore[no-untyped-def]
    """The suite never reads or writes the user's cache (~/.cache/tuneproof): mutation runs and failing
    tests could leave entries there that another run would trust."""
    import os
    import tempfile

    os.environ["TUNEPROOF_CACHE"] = tempfile.mkdtemp(prefix="tuneproof-test-cache-")
