"""A submission's Python is run from its source, never from bytecode shipped beside it, while
the installed packages (torch) keep reading their own bytecode (grader.common.pyfile)."""
import os
import py_compile
import subprocess
import sys
import textwrap

from grader.common.paths import ROOT


def _shipped_pyc(folder, name, source, runs):
    """folder/name.py holds `source`; its __pycache__ entry holds `runs`' bytecode, stamped with
    the source's mtime and size, so that Python would take it for the source's own."""
    path = folder / f"{name}.py"
    path.write_text(source)
    decoy = folder / f"{name}_decoy.py"
    decoy.write_text(runs.ljust(len(source)))  # the same size
    st = path.stat()
    os.utime(decoy, ns=(st.st_atime_ns, st.st_mtime_ns))
    pyc = folder / "__pycache__" / f"{name}.{sys.implementation.cache_tag}.pyc"
    py_compile.compile(str(decoy), cfile=str(pyc), doraise=True)
    decoy.unlink()


def test_shipped_bytecode_is_never_run_instead_of_the_source(tmp_path):
    track = tmp_path / "tree" / "01_x" / "triton"
    track.mkdir(parents=True)
    _shipped_pyc(track, "op", "import helper\nWHO = 'source ' + helper.WHO\n", "WHO = 'pyc'")
    _shipped_pyc(track, "helper", "WHO = 'source'\n", "WHO = 'pyc'")
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from grader.common.pyfile import import_file, source_only_under
        source_only_under(Path({str(tmp_path / 'tree')!r}))
        import json  # not under the tree: its own bytecode, as in any process
        assert json.__spec__.loader.__class__.__name__ == "SourceFileLoader"
        print(import_file(Path({str(track / 'op.py')!r}), "op").WHO)
    """)
    # the decoys would run without the grader's loader (what the test relies on)
    plain = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, "
                            f"{str(track)!r}); import op; print(op.WHO)"],
                           capture_output=True, text=True, cwd=tmp_path)
    assert plain.stdout.strip() == "pyc", plain.stderr
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "source source"
    assert sorted(p.name for p in track.iterdir()) == ["__pycache__", "helper.py", "op.py"]
