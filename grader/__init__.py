"""Course tooling for mini: exercise checks, the hidden-test sandbox, solution regions,
and the ``mini-course`` command (release, import, autograde, feedback, grades, check,
workspace).

Layout:

- :mod:`grader.checks`     the check registry (``@check(slot_id, points)``), ``run_in_process``,
                           one module ``chNN_topic.py`` per chapter, strict helpers.
- :mod:`grader.mistakes`   the catalogue of typical wrong implementations per chapter.
- :mod:`grader.hidden`     ``run_check(slot_id, fn)``: the one call a hidden-test cell makes.
- :mod:`grader.sandbox`    runs a check on a pickled student function in a fresh subprocess.
- :mod:`grader.solutions`  solution regions in mini and in notebooks; the student copy of mini.
- :mod:`grader.course`     the nbgrader course directory (init/release/import/autograde/...).
- :mod:`grader.cli`        ``mini-course``.
- :mod:`grader.notebook_build` ``mini-course build``: the chapter notebooks from their sources
                           (``course/sources/NN_topic/*.md``, see ``course/AUTHORING.md``).
"""
