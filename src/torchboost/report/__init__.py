"""Reports: the doctor's report (terminal, Markdown, HTML with plots, JSON).

Public names::

    build_report(facts, findings) -> dict                 the report.json document
    write_doctor_report(facts, findings, out_dir) -> {"json", "md", "html": Path}
    print_doctor_report(facts, findings, console, paths)  rich tables in the terminal
"""

from torchboost.report.doctor import SCHEMA_VERSION, build_report, print_doctor_report, write_doctor_report

__all__ = ["SCHEMA_VERSION", "build_report", "print_doctor_report", "write_doctor_report"]
