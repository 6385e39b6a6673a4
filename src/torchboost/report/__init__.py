"""Reports: the doctor's report (terminal, Markdown, HTML with plots, JSON).

Public names::

    build_report(facts, findings) -> dict                 the report.json document
    write_doctor_report(facts, findings, out_dir) -> {"json", "md", "html": Path}
    print_doctor_report(facts, findings, console, paths)  rich tables in the terminal
    build_tune_report(summary) -> dict                    the tuner's report.json document
    write_tune_report(summary, out_dir) -> {"json", "md", "html": Path}
    print_tune_report(summary, console, paths)            before/after, waterfall, decisions

A tune ``summary`` is plain data: the tuner's ``tune_summary`` of a run.
"""

from torchboost.report.doctor_report import SCHEMA_VERSION, build_report, print_doctor_report, write_doctor_report
from torchboost.report.tune_report import TUNE_SCHEMA_VERSION, build_tune_report, print_tune_report, write_tune_report

__all__ = ["SCHEMA_VERSION", "build_report", "print_doctor_report", "write_doctor_report",
           "TUNE_SCHEMA_VERSION", "build_tune_report", "print_tune_report", "write_tune_report"]
