"""Documents cite only what exists: every relative link, and every repository file a README,
an exercise, a starter or a solution names. Files outside the repository (the shared notes a
course was built from) are not cited to learners. Measured figures live in one place,
docs/performance.md (generated): the READMEs cite it and never the old results/ folder."""
import re
from pathlib import Path

import pytest

from grader.common.paths import ROOT

SKIP = {".git", ".venv", ".cache", ".hypothesis", "__pycache__", ".whl", ".gpu", "node_modules"}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s#]+)(?:#[^)]*)?\)")
CITED = re.compile(r"(?<![\w./-])((?:grader|benchmarks|docs|exercises|tests|include|solutions|"
                   r"starter)/[\w./-]*\w\.(?:md|py|cu|cuh|cpp|h|toml|json|png|txt|sh))\b")
OUTSIDE = re.compile(r"(?<![\w/.])(ANCHORS|FACTS|CURRICULUM|STYLE|TRUST)\.md\b")
LEARNER_FACING = ("README.md", "exercises", "solutions", "starter", "include")


def _tracked() -> set | None:
    """The repository's files as git sees them (tracked, or new and not ignored): what a clone
    holds. None outside a git checkout (then every file under ROOT but the SKIP folders)."""
    import subprocess
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True)
    return {ROOT / line for line in out.stdout.splitlines()} if out.returncode == 0 else None


TRACKED = _tracked()


def _files(suffixes):
    for p in ROOT.rglob("*"):
        if p.is_file() and p.suffix in suffixes and not SKIP & set(p.relative_to(ROOT).parts) \
                and (TRACKED is None or p in TRACKED):
            yield p


def _rel(p):
    return str(p.relative_to(ROOT))


def _prose(text: str) -> str:
    """Markdown without its code (``` blocks and `spans`), where brackets are not links."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))


@pytest.mark.parametrize("doc", sorted(_files({".md"})), ids=_rel)
def test_relative_links_exist(doc):
    missing = [t for t in LINK.findall(_prose(doc.read_text()))
               if "://" not in t and not t.startswith("mailto:")
               and not (doc.parent / t).exists()]
    assert not missing, f"{_rel(doc)} links to missing files: {missing}"


def test_cited_files_exist():
    bad = []
    for f in _files({".md", ".py", ".cu", ".cuh", ".cpp", ".h", ".toml"}):
        for path in CITED.findall(f.read_text(errors="replace")):
            if "NN_" in path or "*" in path:
                continue  # a pattern, not a file
            if not (ROOT / path).exists() and not (f.parent / path).exists():
                bad.append(f"{_rel(f)}: {path}")
    assert not bad, "files cited but not in the repository:\n" + "\n".join(bad)


def test_learners_are_not_sent_outside_the_repository():
    bad = []
    for f in _files({".md", ".py", ".cu", ".cuh", ".cpp", ".toml"}):
        if not _rel(f).startswith(LEARNER_FACING):
            continue
        for m in OUTSIDE.finditer(f.read_text(errors="replace")):
            bad.append(f"{_rel(f)}: {m.group(0)}")
    assert not bad, ("cites notes that are not in the repository (cite docs/performance.md for "
                     "a measured figure instead):\n" + "\n".join(bad))


def test_check_hints_cite_sections_that_exist():
    """exercise.toml [hints] end with '(README: Section)': that section is a heading of the
    exercise's README, so a hint never sends a learner to a section that is gone."""
    from grader.common.discover import discover
    missing = []
    for ex in discover():
        headings = {m.strip() for m in re.findall(r"^#+ (.+)$", (ex.dir / "README.md").read_text(),
                                                  re.M)}
        for check, hint in ex.hints.items():
            m = re.search(r"\(README: (.+?)(?:, '[^']*')?\)$", hint)
            if m is None or m.group(1) not in headings:
                missing.append(f"{ex.id} {check}: {hint[-60:]!r}")
    assert not missing, "hints without a README section that exists:\n" + "\n".join(missing)


def _readmes():
    return [ROOT / "README.md", *sorted((ROOT / "exercises").glob("*/README.md"))]


def test_no_readme_names_the_old_results_folder():
    """results/ is gone (git history keeps the diary and the experiments): the measured figures
    live in docs/performance.md, and the benchmarks that make them in benchmarks/."""
    bad = [f"{_rel(f)}:{i}" for f in _readmes()
           for i, line in enumerate(f.read_text().splitlines(), 1)
           if re.search(r"(?<![\w./])results/", line)]
    assert not bad, "READMEs naming results/ (cite docs/performance.md):\n" + "\n".join(bad)


def test_old_results_citations_resolve_in_history():
    """Comments that still cite results/ (the first rounds' scripts and logs) name files that
    git history keeps: `git show 3e7a589^:results/PATH` prints each one (docs/performance.md
    says so). A citation of a file that never existed is caught here."""
    import subprocess
    cites = set()
    for f in sorted(TRACKED or ()):
        if f.suffix not in {".py", ".toml", ".cu", ".cuh", ".cpp", ".md"} or "docs" in f.parts \
                or "tests" in f.parts:
            continue
        cites |= {m.rstrip(".,)") for m in re.findall(r"(?<![\w./])results/[\w./-]+",
                                                      f.read_text(errors="replace"))}
    cites.discard("results/PATH")  # the placeholder in the sentence that explains the rule
    if not cites:
        return
    have = subprocess.run(["git", "cat-file", "-e", "3e7a589^:results"], cwd=ROOT,
                          capture_output=True)
    if have.returncode != 0:
        pytest.skip("no git history here (a shallow clone): the removed results/ cannot be read")
    missing = [c for c in sorted(cites) if subprocess.run(
        ["git", "cat-file", "-e", f"3e7a589^:{c.rstrip('/')}"], cwd=ROOT,
        capture_output=True).returncode != 0]
    assert not missing, "results/ citations that git history does not hold:\n" + "\n".join(missing)


def test_readmes_cite_the_performance_document():
    """A figure appears in one place: the top README and every exercise README send the reader
    to docs/performance.md for the measured figures."""
    missing = [_rel(f) for f in _readmes() if "docs/performance.md" not in f.read_text()]
    assert not missing, "READMEs that do not cite docs/performance.md: " + ", ".join(missing)


def test_performance_document_says_device_date_and_commit():
    """docs/performance.md is generated (grader/tools/benchdoc.py): its header is a table of every
    section with the device, date, commit and command that measured it."""
    text = (ROOT / "docs" / "performance.md").read_text()
    head = text.split("\n## ", 1)[0]
    assert "do not edit by hand" in head
    assert "| section | device | date | commit | command |" in head
    rows = [line for line in head.splitlines() if line.startswith("| [")]
    assert rows, "no measured section in the header"
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 5 and all(cells), row
