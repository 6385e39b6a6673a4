"""Reports: the doctor's report (terminal, Markdown, HTML with plots, JSON).

Public names::

    build_report(facts, findings) -> dict                 the report.json document
    write_doctor_report(facts, findings, out_dir) -> {"json", "md", "html": Path}
    print_doctor_report(facts, findings, console, paths)  rich tables in the terminal
    build_tune_report(run) -> dict                        the tuner's report.json document
    write_tune_report(run, out_dir) -> {"json", "md", "html": Path}
    print_tune_report(run, console, paths, config_path=)  before/after, waterfall, decisions
"""

from torchboost.report.doctor import SCHEMA_VERSION, build_report, print_doctor_report, write_doctor_report
from torchboost.report.tune import TUNE_SCHEMA_VERSION, build_tune_report, print_tune_report, write_tune_report

__all__ = ["SCHEMA_VERSION", "build_report", "print_doctor_report", "write_doctor_report",
           "TUNE_SCHEMA_VERSION", "build_tune_report", "print_tune_report", "write_tune_report"]
