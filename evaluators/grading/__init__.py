"""The grading half of the evaluators: evaluator kinds (one module each, registered in kinds.py), the verdict
rules (verdict.py, standard library only), tamper checks, hidden-test ids, and the in-container code
(grader/)."""
