"""The grading half of the evaluators: evaluator kinds (kind.py the Kind core and its capabilities; one
module each, registered in tasks/kinds.py; Harbor's code by capability in harbor/), the grading containers
(grade.py), the verdict rules (verdict.py, standard library only), hidden-test ids, and the in-container
code (grader/)."""
