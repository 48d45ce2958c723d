"""The orchestration half of evaluators/: one run's settings (config.py, EvalConfig), one attempt and its
retries (attempt.py), the run and its scheduler (runner.py), what acts in a sandbox (policies.py: the loop,
the oracle, nothing), the attempt's sandbox as its evaluator kind shapes it (attempt_sandbox.py), the
tasks' images (task_images.py) and network (network.py), the progress display (progress.py) and attempts
on a Ray cluster (cluster.py). The grading half is evaluators/grading/; the commands (validate, rescore,
selftest, cli) sit above both."""
