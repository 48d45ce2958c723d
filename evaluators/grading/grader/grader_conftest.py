"""The grader's conftest: copied to /grader/conftest.py in every grading container (trusted code).

It puts the candidate behind a process boundary (candidate.py and its modules, beside it in _harness/),
makes the processes that tests start run as the candidate user, and gives tests temporary folders that the
candidate can use too.
"""

import os
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "_harness"))
import _harness_candidate

_harness_candidate.install(os.environ.get("HARNESS_IMPORT_MODE", "proxy"))
# Tests' temporary folders: the candidate's processes read and write there; nothing else of the
# grader's is reachable from them (this folder can be entered but not listed).
_SHARED = tempfile.mkdtemp(prefix="grader-", dir="/tmp")
os.chmod(_SHARED, 0o711)


@pytest.fixture
def tmp_path():
    path = tempfile.mkdtemp(dir=_SHARED)
    os.chmod(path, 0o777)
    return Path(path)


@pytest.fixture
def tmpdir(tmp_path):
    from _pytest.compat import legacy_path

    return legacy_path(tmp_path)
