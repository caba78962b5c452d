"""The grader's layout holds what its README and docstrings say: rooms by process whose arrows
run one way (.importlinter, checked by import-linter), modules of a readable size, and imports
inside functions only where there is a reason, said beside them."""
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GRADER = ROOT / "grader"
MAX_LINES = 450
MAX_FUNCTION_IMPORTS = 40


def test_the_rooms_contract_holds():
    """cli -> tools -> (run | judge | submission) -> common, the three process rooms apart."""
    pytest.importorskip("importlinter", reason="import-linter is in requirements.txt (make "
                                               "installs it); this machine's python lacks it")
    run = subprocess.run([sys.executable, "-c", LINT], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, f"an import crosses the rooms' walls:\n{run.stdout[-3000:]}"
    assert "1 kept, 0 broken" in run.stdout, run.stdout[-3000:]


# import-linter's own command line (`lint-imports`), run where the repository is importable
LINT = ("import sys; from importlinter.cli import lint_imports_command as c; "
        "sys.exit(c(['--config', '.importlinter', '--no-cache']))")


def test_each_room_says_what_runs_there_and_what_it_may_import():
    for room in ("common", "run", "judge", "submission", "tools"):
        doc = ast.get_docstring(ast.parse((GRADER / room / "__init__.py").read_text())) or ""
        assert "What runs here" in doc or "What it may import" in doc, room
        assert "import" in doc, room


def _modules():
    return sorted(p for p in GRADER.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_is_longer_than_a_sitting():
    long = [f"{p.relative_to(ROOT)}: {n}" for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert not long, f"modules over {MAX_LINES} lines (split them by job): {long}"


def _function_imports(path: Path):
    src = path.read_text()
    lines = src.splitlines()
    seen = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)) and sub.lineno not in seen:
                    seen.add(sub.lineno)
                    yield sub.lineno, lines[sub.lineno - 1], lines[sub.lineno - 2]


def test_imports_inside_functions_are_few_and_say_why():
    """A module's imports are at its top, unless a reason says otherwise (a heavy import that
    must come after something else, an optional package, a command's own modules): the reason
    is a comment on the line or the line above."""
    found, silent = [], []
    for p in _modules():
        for lineno, line, above in _function_imports(p):
            found.append(f"{p.relative_to(ROOT)}:{lineno}")
            if "#" not in line and not re.match(r"\s*#", above):
                silent.append(f"{p.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert not silent, f"imports inside functions without a reason: {silent}"
    assert len(found) < MAX_FUNCTION_IMPORTS, found
