"""The docs build with warnings as errors, their generated tables follow the code, and the
README stays a first screen a user reads."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from torchboost.config import section_classes
from torchboost.reference import (GENERATED, config_reference, field_docs, filled, stale_blocks, technique_cards,
                                  technique_order)
from torchboost.techniques.registry import techniques

ROOT = Path(__file__).resolve().parents[1]


def _missing_keys(reference: str) -> list[str]:
    """``section.key`` of every BoostConfig field the reference does not list under its section."""
    missing = []
    for name, cls in section_classes().items():
        part = reference.partition(f"### `[{name}]`")[2].partition("### `[")[0]
        missing += [f"{name}.{f.name}" for f in dataclasses.fields(cls) if f"| `{f.name}` |" not in part]
    return missing


def test_the_generated_reference_lists_every_key_with_its_own_words():
    reference = config_reference()
    assert _missing_keys(reference) == []
    assert "| `shards_by_worker` | `false` |" in reference  # a key the hand-written table once left out
    threads = field_docs(section_classes()["cpu"])["threads"]
    assert threads and threads.split("|")[0].strip() in reference


def test_twin_a_reference_without_a_key_is_caught():
    broken = "\n".join(line for line in config_reference().splitlines() if "`prefetch_factor`" not in line)
    assert _missing_keys(broken) == ["loader.prefetch_factor"]


def test_the_technique_tables_follow_the_registry():
    rows = re.findall(r"^\| (\d+) \| `([a-z0-9_]+)` \| .+ \|$", technique_order(), flags=re.M)
    assert [name for _, name in rows] == [t.name for t in techniques()]
    assert [int(i) for i, _ in rows] == [t.order for t in techniques()]
    assert all(f"(`{t.name}`)" in technique_cards() for t in techniques())


def test_every_generated_marker_in_the_docs_is_known_and_closed():
    pages = [page.read_text(encoding="utf-8") for page in (ROOT / "docs").glob("*.md")]
    marks = {m for text in pages for m in re.findall(r"<!-- torchboost:([a-z-]+) -->", text)}
    closed = {m for text in pages for m in re.findall(r"<!-- /torchboost:([a-z-]+) -->", text)}
    assert marks == closed == set(GENERATED)


def test_the_pages_hold_the_generated_tables_as_the_code_makes_them_now():
    # The reference reads on the repository's web page without a build: the tables are in
    # the pages themselves. Stale? python docs/hooks/reference.py rewrites them.
    stale = {page.name: found for page in sorted((ROOT / "docs").glob("*.md"))
             if (found := stale_blocks(page.read_text(encoding="utf-8")))}
    assert stale == {}
    config = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    assert _missing_keys(config) == []  # every key, without a build


def test_twin_a_page_whose_table_is_stale_is_caught():
    page = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    stale = page.replace("| `prefetch_factor` |", "| `prefetch_factr` |")
    assert stale != page and stale_blocks(stale) == ["config-reference"]
    assert filled(stale) == page  # and rewriting it gives the page back


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("mkdocs") is None and not (Path(sys.executable).parent / "mkdocs").exists(),
                    reason="mkdocs is not installed (pip install '.[test]')")
def test_the_docs_build_with_warnings_as_errors(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    config = (tmp_path / "site" / "config" / "index.html").read_text(encoding="utf-8")
    assert "torchboost:config-reference" not in config and "prefetch_factor" in config


def _build_edited(tmp_path: Path, name: str, edit: Callable[[str], str]) -> subprocess.CompletedProcess:
    """The strict build of a copy of the docs whose page ``name`` is ``edit``-ed."""
    if shutil.which("mkdocs") is None and not (Path(sys.executable).parent / "mkdocs").exists():
        pytest.skip("mkdocs is not installed")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / name
    page.write_text(edit(page.read_text(encoding="utf-8")), encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_twin_a_stale_table_fails_the_build(tmp_path):
    done = _build_edited(tmp_path, "config.md", lambda text: text.replace("| `prefetch_factor` |", "| `prefetch_factr` |"))
    assert done.returncode != 0 and "out of date (config-reference)" in done.stderr


@pytest.mark.slow
def test_twin_a_broken_link_fails_the_strict_build(tmp_path):
    done = _build_edited(tmp_path, "run.md", lambda text: text + "\nSee [nowhere](no-such-page.md).\n")
    assert done.returncode != 0 and "no-such-page.md" in done.stderr


def test_the_readme_is_a_first_screen_a_user_reads():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200
    first_screen = "\n".join(lines[:20])
    assert "torchboost demo" in first_screen and "python -m pytest" in first_screen



def _gpu_block(readme: str) -> list[str]:
    """The command lines of the README's install block for a GPU machine."""
    block = readme.partition("On a GPU machine")[2].partition("```bash\n")[2].partition("```")[0]
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_the_gpu_install_keeps_the_users_cuda_build():
    lines = _gpu_block((ROOT / "README.md").read_text(encoding="utf-8"))
    assert any("torchboost demo" in line for line in lines) and any("pytest" in line for line in lines)
    assert not [line for line in lines if "torch==" in line or "install torch" in line]
    assert '"torch>=2.4"' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")  # what the package asks


def test_twin_the_cpu_block_would_replace_it():
    cpu = (ROOT / "README.md").read_text(encoding="utf-8").replace("On a GPU machine", "x").replace(
        "On a fresh machine without a GPU", "On a GPU machine")
    assert any("torch==" in line for line in _gpu_block(cpu))


CPU_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"


def _torch_installs_without_cpu_index(text: str) -> list[str]:
    """Lines that install a pinned torch build with no word of where its CPU build comes from:
    on Linux the public index's ``torch==X`` is the multi-GB CUDA build."""
    lines = [line for line in text.splitlines() if re.search(r"pip install (?:--[a-z-]+ )*torch==", line)]
    return [line for line in lines if CPU_INDEX not in line]


@pytest.mark.parametrize("path", ["README.md", "docs/index.md", ".ci/run"])
def test_the_cpu_install_lines_name_pytorchs_cpu_index(path):
    text = (ROOT / path).read_text()
    assert re.search(r"pip install (?:--[a-z-]+ )*torch==", text), f"{path} lost its install line"
    assert _torch_installs_without_cpu_index(text) == []


def test_twin_a_bare_torch_pin_is_caught():
    assert _torch_installs_without_cpu_index("pip install torch==2.13.0 && pip install -e .") != []
