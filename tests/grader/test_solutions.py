"""Solution regions in mini and in notebooks, the student copy of mini, sync-solutions."""
from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

from grader.cli import main
from grader.course import default_mini_src, list_chapters
from grader.solutions import (BEGIN, END, normalize, notebook_regions, reference_regions,
                              scan_source, strip_package, strip_source, sync_notebook)
from grader_helpers import FIXTURE_CHAPTER, FIXTURE_COURSE

MINI = default_mini_src()
REPO = MINI.parent
FIXTURE_NB = FIXTURE_COURSE / FIXTURE_CHAPTER / "fixture.ipynb"


def course_notebooks() -> list[Path]:
    out = [FIXTURE_NB]
    for root in (REPO / "course",):
        for ch in list_chapters(root):
            out += sorted((root / ch).glob("*.ipynb"))
    return out


def test_reference_regions_of_mini():
    refs = reference_regions(MINI)
    path, text = refs["03.compact_strides"]
    assert path.name == "strides.py"
    assert text.splitlines()[0] == "strides = []"            # dedented
    assert text.rstrip().splitlines()[-1] == "return tuple(reversed(strides))"
    assert BEGIN not in text and END not in text
    assert all(len(k) > 3 and k[2] == "." for k in refs)


def test_scan_source_handles_methods_trailing_markers_and_errors():
    src = textwrap.dedent('''
        from mini.exercises import exercise

        class K:
            @exercise("07.method")
            def f(self, x):
                """doc"""
                ### BEGIN SOLUTION
                return x + 1
                ### END SOLUTION

        @exercise("07.free", fallback=None)
        def g(x):
            ### BEGIN SOLUTION
            if x:
                return 1
            return 2
            ### END SOLUTION
        ''')
    regions = {r.slot_id: r for r in scan_source(src, Path("k.py"))}
    assert regions["07.method"].text == "return x + 1\n"
    assert regions["07.free"].text == "if x:\n    return 1\nreturn 2\n"
    assert regions["07.method"].indent == " " * 8
    broken = src.replace("    ### END SOLUTION\n\n@exercise", "\n@exercise", 1)
    with pytest.raises(ValueError, match="never closed|expected one"):
        scan_source(broken, Path("k.py"))


def test_strip_source_stubs_and_imports():
    src = textwrap.dedent('''
        """Module docstring."""
        from __future__ import annotations

        import numpy as np
        from mini.exercises import exercise


        @exercise("03.a")
        def a(x):
            """doc"""
            ### BEGIN SOLUTION
            return x * 2
            ### END SOLUTION


        @exercise("04.b")
        def b(x):
            ### BEGIN SOLUTION
            return x * 3
            ### END SOLUTION


        @exercise("02.c")
        def c(x):
            ### BEGIN SOLUTION
            return x * 4
            ### END SOLUTION
        ''')
    out, stubbed = strip_source(src, "m.py", 3)
    assert stubbed == ["03.a", "04.b"]
    assert '    raise ExerciseNotImplemented("03.a")\n' in out
    assert '    raise ExerciseNotImplemented("04.b", future=True)\n' in out
    assert "return x * 2" not in out and "return x * 3" not in out
    assert "return x * 4" in out                                   # catch-up reference
    lines = out.splitlines()
    assert lines.index("from mini.exercises import ExerciseNotImplemented") > \
        lines.index("from __future__ import annotations")
    compile(out, "m.py", "exec")
    again, _ = strip_source(out, "m.py", 3)                         # idempotent import
    assert again.count("import ExerciseNotImplemented") == 1


def _run_in_copy(pkg_parent: Path, code: str) -> str:
    proc = subprocess.run([sys.executable, "-I", "-c",
                           f"import sys; sys.path.insert(0, {str(pkg_parent)!r})\n" + code],
                          capture_output=True, text=True, cwd=str(pkg_parent), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_strip_package_makes_an_importable_student_copy(tmp_path):
    dst = tmp_path / "mini"
    stubbed = strip_package(MINI, dst, 3)
    refs = reference_regions(MINI)
    assert sorted(stubbed) == sorted(s for s in refs if int(s[:2]) >= 3)
    assert (dst / "_release.py").read_text().endswith("CHAPTER = 3\n")
    assert not list(dst.rglob("__pycache__"))
    for so in MINI.rglob("*.so"):
        assert (dst / so.relative_to(MINI)).exists(), so
    for slot in stubbed:                                   # no line of a stripped region left
        path = dst / refs[slot][0].relative_to(MINI)
        body = path.read_text()
        assert f'raise ExerciseNotImplemented("{slot}"' in body
    out = _run_in_copy(tmp_path, textwrap.dedent('''
        import mini, mini._release
        from mini.exercises import ExerciseNotImplemented, slots
        assert mini.__file__.startswith(sys.path[0]), mini.__file__
        print("chapter", mini._release.CHAPTER)
        from mini.exercises import reference
        from mini.ndarray import strides as S
        # a stub hands out nothing: no .reference, no __wrapped__, reference() raises
        assert S.compact_strides.reference is None and not hasattr(S.compact_strides, "__wrapped__")
        try:
            reference("03.compact_strides")
        except ExerciseNotImplemented as e:
            print("no reference", e.slot_id)
        try:
            slots()["03.compact_strides"].reference((2, 3))
        except ExerciseNotImplemented as e:
            print("stub", e.slot_id, e.future)
        catch_up = [s for s in slots() if s < "03"]
        for s in catch_up:
            assert "ExerciseNotImplemented" not in slots()[s].reference.__code__.co_names, s
        print("catch-up", len(catch_up))
        '''))
    assert "chapter 3" in out and "stub 03.compact_strides False" in out
    assert "no reference 03.compact_strides" in out


def test_strip_package_future_chapters_and_refusal(tmp_path):
    dst = tmp_path / "mini"
    strip_package(MINI, dst, 2)
    out = _run_in_copy(tmp_path, textwrap.dedent('''
        from mini.exercises import ExerciseNotImplemented, slots
        try:
            slots()["03.compact_strides"].reference((2, 3))
        except ExerciseNotImplemented as e:
            print("future", e.future)
        '''))
    assert "future True" in out
    with pytest.raises(FileExistsError):
        strip_package(MINI, dst, 2)


def test_notebook_regions_of_the_fixture():
    regions = notebook_regions(FIXTURE_NB)
    assert set(regions) == {"03.compact_strides", "03.offset"}
    assert regions["03.compact_strides"].startswith("strides = []")


@pytest.mark.parametrize("nb", course_notebooks(), ids=lambda p: p.name)
def test_notebook_regions_equal_minis_references(nb):
    refs = reference_regions(MINI)
    for slot, text in notebook_regions(nb).items():
        assert slot in refs, f"{nb}: @implement({slot!r}) has no reference in mini"
        assert normalize(text) == normalize(refs[slot][1]), f"{nb}: {slot} differs from mini"


def test_sync_notebook_rewrites_a_drifted_solution(tmp_path):
    nb_path = tmp_path / "fixture.ipynb"
    shutil.copy(FIXTURE_NB, nb_path)
    nb = nbformat.read(str(nb_path), as_version=4)
    for cell in nb.cells:
        cell.source = cell.source.replace("step *= max(dim, 1)", "step *= dim  # drifted")
    nbformat.write(nb, str(nb_path))
    refs = reference_regions(MINI)
    assert sync_notebook(nb_path, refs, write=False) == ["03.compact_strides"]
    assert "drifted" in nb_path.read_text()
    assert sync_notebook(nb_path, refs) == ["03.compact_strides"]
    assert notebook_regions(nb_path) == notebook_regions(FIXTURE_NB)
    assert sync_notebook(nb_path, refs) == []
    # The rest of the cell is untouched.
    cells = nbformat.read(str(nb_path), as_version=4).cells
    assert [c.source for c in cells] == [c.source for c in nbformat.read(str(FIXTURE_NB), 4).cells]


def test_sync_solutions_command(tmp_path, capsys):
    src = tmp_path / "course"
    shutil.copytree(FIXTURE_COURSE, src)
    assert main(["sync-solutions", "--check", "--course-src", str(src)]) == 0
    nb_path = src / FIXTURE_CHAPTER / "fixture.ipynb"
    nb_path.write_text(nb_path.read_text().replace("position = offset", "position = 0"))
    assert main(["sync-solutions", "--check", "--course-src", str(src)]) == 1
    assert "03.offset" in capsys.readouterr().out
    assert main(["sync-solutions", "--course-src", str(src)]) == 0
    assert main(["sync-solutions", "--check", "--course-src", str(src)]) == 0


# --------------------------------------------------------------------------- C++ / CUDA regions

CPP = """\
// kernels of a device
static int helper() { return 1; }
// BEGIN SOLUTION 04.cuda_add
__global__ void add_kernel(const float* a, float* out, int n) { out[0] = a[0]; }
int launch_add(int n) { return helper() + n; }
// END SOLUTION
    // BEGIN SOLUTION 05.adamw_step
    int later() { return 2; }
    // END SOLUTION
int launch_other() { return helper(); }
"""


def test_cpp_regions_are_scanned_and_stripped_by_chapter():
    from grader.solutions import scan_cpp_source, strip_cpp_source
    regions = scan_cpp_source(CPP, Path("k.cu"))
    assert [(r.slot_id, r.begin, r.end) for r in regions] == [("04.cuda_add", 2, 5), ("05.adamw_step", 6, 8)]
    assert "launch_add" in regions[0].text and "BEGIN" not in regions[0].text
    new, gone = strip_cpp_source(CPP, "k.cu", 4)
    assert gone == ["04.cuda_add", "05.adamw_step"]
    assert "add_kernel" not in new and "later" not in new and "launch_other" in new
    assert new.count("\n") == CPP.count("\n") - 5          # each region became one line
    assert "    // (05.adamw_step: " in new                 # indentation kept
    assert strip_cpp_source(CPP, "k.cu", 5)[1] == ["05.adamw_step"]     # chapter 04 ships
    assert strip_cpp_source(CPP, "k.cu", 6) == (CPP, [])


@pytest.mark.parametrize("bad, message", [
    (CPP.replace("// END SOLUTION\n    // BEGIN", "    // BEGIN", 1), "nested"),
    (CPP.replace("// BEGIN SOLUTION 04.cuda_add", "// BEGIN SOLUTION"), "names its exercise"),
    (CPP + "// END SOLUTION\n", "without"),
    (CPP + "// BEGIN SOLUTION 04.cuda_add\n", "never closed"),
])
def test_broken_cpp_regions_are_errors(bad, message):
    from grader.solutions import scan_cpp_source
    with pytest.raises(ValueError, match=message):
        scan_cpp_source(bad, Path("k.cu"))


def test_minis_cpp_regions_name_its_exercises(tmp_path):
    from grader.solutions import cpp_regions
    regions = cpp_regions(MINI)
    assert {r.slot_id for r in regions} >= {"04.cuda_add", "04.cuda_block_sum_shuffle", "04.cuda_matmul_tiled"}
    assert all(r.path.suffix == ".cu" for r in regions)
    bad = tmp_path / "mini"
    shutil.copytree(MINI, bad, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    (bad / "backends" / "cuda" / "kernels" / "extra.cu").write_text(
        "// BEGIN SOLUTION 04.no_such_slot\nint f() { return 0; }\n// END SOLUTION\n")
    with pytest.raises(ValueError, match="names no exercise"):
        cpp_regions(bad)


def test_a_chapter_04_release_ships_no_cuda_answer_and_chapter_05_ships_them(tmp_path):
    """The student copy of chapter 04 holds no line of the CUDA exercises' references, in
    Python or in .cu files (find_leaks, which also reads the C++ regions), and none of mini's
    kernels that would give them away; chapter 05's copy has them all (catch-up)."""
    from grader.course import find_leaks
    from grader.solutions import cpp_regions
    rel4 = tmp_path / "release4"
    strip_package(MINI, rel4 / "mini", 4)
    assert find_leaks(rel4, 4, MINI) == []
    backend = (rel4 / "mini" / "backends" / "cuda" / "kernels" / "backend.cu").read_text()
    for name in ("ewise_kernel", "launch_ewise", "warp_combine", "row_reduce_kernel", "launch_matmul("):
        assert name not in backend, name
    assert len(cpp_regions(MINI)) == backend.count("it arrives with that chapter's solutions")
    assert not list((rel4 / "mini" / "backends" / "cuda" / "kernels").glob("matmul*.cu"))
    exercises = (rel4 / "mini" / "backends" / "cuda" / "exercises.py").read_text()
    for line in ("As[ty][tx] = ", "__shfl_down_sync(0xffffffff", "i += stride", "tile[TDIM][TDIM + 1]"):
        assert line not in exercises, line
    rel5 = tmp_path / "release5"
    strip_package(MINI, rel5 / "mini", 5)
    assert (rel5 / "mini" / "backends" / "cuda" / "kernels" / "backend.cu").read_text() == \
        (MINI / "backends" / "cuda" / "kernels" / "backend.cu").read_text()
    assert "// --- host launcher ---" in (rel5 / "mini" / "backends" / "cuda" / "exercises.py").read_text()
    # a planted kernel line is found
    (rel4 / "mini" / "backends" / "cuda" / "kernels" / "leak.cu").write_text(
        "        v += __shfl_down_sync(0xffffffff, v, offset);   // all 32 lanes take part\n")
    assert [line for _, _, line in find_leaks(rel4, 4, MINI)] == [
        "v += __shfl_down_sync(0xffffffff, v, offset);   // all 32 lanes take part"]
