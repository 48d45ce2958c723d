"""`harness report` and the summary `harness eval` prints: tables, plots and report.html for runs.

One module per concept (imports go down this list, never up):
  runs.py     loading runs: RunData (attempts and metrics.run_summary) read through results.store
  tables.py   the tables: terminal text (`print_summary`), summary.md, summary.csv/.parquet
  plots.py    the matplotlib figures, as PNG data URLs
  page.py     report.html: the page and the trajectory viewer; `clip` for long text
  static/     the page's report.css and report.js (inlined into the page)
  show.py     `harness show`: one attempt as text
  build.py    `build_report`: all of the above for `harness report` (training rounds: results/rounds.py)
"""

from results.report.build import build_report
from results.report.tables import format_table, id_list, print_summary

__all__ = ["build_report", "format_table", "id_list", "print_summary"]
