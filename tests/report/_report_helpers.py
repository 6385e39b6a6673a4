"""Hand-made Facts and Findings for the report tests."""

from __future__ import annotations

import re
import shutil
import subprocess

from torchboost.diagnose import Facts, Finding, LoaderFacts, ModelFacts, OptimizerFacts, StepRecord, diagnose
from torchboost.evidence.observed import ProfileFacts

HOSTILE = '<script>alert("x")</script> [red]boom[/red] | `tick`'
"""A user string that must stay text in every format."""

TOP_OPS = [
    {"name": "aten::addmm", "self_cpu_ms": 24.0, "self_device_ms": 0.0, "calls": 6},
    {"name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "self_cpu_ms": 12.0,
     "self_device_ms": 0.0, "calls": 2},
    {"name": f"aten::{HOSTILE}", "self_cpu_ms": 4.0, "self_device_ms": 0.0, "calls": 2},
]
"""A profiler window of 2 steps: 40 ms of operator time, addmm 60% of it."""


def data_bound_facts(n_steps: int = 12) -> Facts:
    """A CPU run waiting on data 60% of the step, with an unfused optimizer."""
    steps = [StepRecord(index=5 + i, total_ms=100.0 + i, data_ms=60.0, forward_ms=15.0, backward_ms=10.0,
                        optimizer_ms=10.0) for i in range(n_steps)]
    return Facts(
        env={"device": "cpu", "cpu_cores": 8, "cpu_bf16": True, "can_compile": True, "ram_bytes": 64 * 2**30,
             "torch_version": "2.x", "cpu_capability": "AVX512"},
        command=["python", "train.py", "--tag", HOSTILE],
        steps=steps,
        warmup_steps=5,
        loader=LoaderFacts(num_workers=0, batch_size=32, num_batches=100),
        model=ModelFacts(class_name="Net", parameters=1000, device="cpu", compiled=True,
                         param_dtypes=["torch.float32"]),
        optimizer=OptimizerFacts(class_name="AdamW", supports_fused=True),
        cpu_threads=6,
        peak_rss_bytes=60 * 2**30,
        losses=[2.3, 2.1, 2.0],  # a NaN loss would be the first finding: tests/diagnose/test_loss_nonfinite.py
        target_steps=20,
        ended="stopped",
        profile=ProfileFacts(steps=2, top_ops=[dict(op) for op in TOP_OPS], trace_path="trace.pt.trace.json"),
    )


def findings_for(facts: Facts) -> list[Finding]:
    """The rules' findings plus one hand-made finding carrying hostile text."""
    hostile = Finding(
        id="sync.host_device", title=f"title {HOSTILE}", evidence={"sync_ops": HOSTILE, "syncs_per_step": 2.0},
        advice="no key", advice_code=f"print({HOSTILE!r})", expected_speedup=1.01,
        formula=f"f = {HOSTILE}", notes=[HOSTILE],
    )
    return [*diagnose(facts), hostile]


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
"""Debian's headless browser, when installed; the page tests skip without it."""


def loaded_images(html_path, profile_dir) -> tuple[int, int]:
    """(loaded, total) images as the page's own script counts them after load."""
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--no-first-run", f"--user-data-dir={profile_dir}", "--virtual-time-budget=5000",
         "--dump-dom", html_path.as_uri()],
        capture_output=True, text=True, timeout=90,
    )
    body = re.search(r"<body[^>]*>", out.stdout)
    assert body, f"no <body> in chromium's DOM dump; stderr: {out.stderr[-2000:]}"
    loaded = re.search(r'data-images-loaded="(\d+)"', body.group(0))
    total = re.search(r'data-images-total="(\d+)"', body.group(0))
    assert loaded and total, f"the page's load script did not run: {body.group(0)}"
    return int(loaded.group(1)), int(total.group(1))


_MEASURE = """<script>
addEventListener('load', () => {
  const bad = [];
  for (const el of document.body.querySelectorAll('*')) {
    const style = getComputedStyle(el);
    if (el.closest('[data-may-scroll]') || el.clientWidth === 0) continue;  // a table of long names may scroll
    if (el.scrollWidth > el.clientWidth + 1) {
      bad.push(el.tagName + (el.id ? '#' + el.id : '') + ' ' + el.scrollWidth + '>' + el.clientWidth);
    }
  }
  const page = document.documentElement.scrollWidth;
  if (page > innerWidth + 1) bad.push('page ' + page + '>' + innerWidth);
  document.body.setAttribute('data-overflow', bad.join(' | ') || 'none');
});
</script>"""


def overflowing(html_path, profile_dir, width: int) -> str:
    """What runs out of its box in ``html_path`` at ``width`` CSS pixels, as Chromium lays it
    out ("none" when nothing): every element's scrollWidth against its own width, and the
    page's against the window (scroll containers excepted)."""
    measured = html_path.with_name(f"measured-{width}.html")
    measured.write_text(html_path.read_text(encoding="utf-8").replace("</body>", _MEASURE + "</body>"),
                        encoding="utf-8")
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--no-first-run", f"--user-data-dir={profile_dir}", f"--window-size={width},900",
         "--virtual-time-budget=5000", "--dump-dom", measured.as_uri()],
        capture_output=True, text=True, timeout=90,
    )
    found = re.search(r'data-overflow="([^"]*)"', out.stdout)
    assert found, f"the measuring script did not run; stderr: {out.stderr[-2000:]}"
    return found.group(1)
