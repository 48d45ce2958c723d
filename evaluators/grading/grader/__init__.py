"""What runs inside a grading container, standard library only (evaluators/grading/pytest_kind.py copies
these files there): the grader's conftest and the candidate proxy (candidate.py and its modules)."""
