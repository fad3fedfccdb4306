"""Course tooling for mini: exercise checks, the hidden-test sandbox, solution regions,
and the ``mini-course`` command (release, import, autograde, feedback, grades, check,
workspace).

Layout (the grading protocol: ``grader/README.md``):

- :mod:`grader.checks`     the check registry (``@check(slot_id, points)``, ``part``), the
                           runner (``evaluate``, ``run_in_process``), one module
                           ``chNN_topic.py`` per chapter, strict helpers, the ``Student``
                           handle a check receives (``checks/student.py``).
- :mod:`grader.mistakes`   the catalogue of typical wrong implementations per chapter.
- :mod:`grader.worker`     what runs next to student code, in the sandbox: the codec (plain
                           data, no pickle), the request loop, the scenarios per chapter.
- :mod:`grader.workerproc` the trusted side of the worker: start, requests with deadlines.
- :mod:`grader.sandbox`    bubblewrap: one launcher for every piece of student code.
- :mod:`grader.kernel`     a Jupyter kernel in the sandbox (for nbclient / nbgrader).
- :mod:`grader.grading`    a notebook's hidden-test verdicts from the worker.
- :mod:`grader.preprocessors` nbgrader preprocessors: sandboxed execution, trusted verdicts,
                           feedback without hidden tests.
- :mod:`grader.batch`      grading one submission in a child process; merging into the
                           gradebook.
- :mod:`grader.hidden`     ``run_check(slot_id, fn)``: the hidden test in an instructor's or
                           self-learner's own kernel.
- :mod:`grader.solutions`  solution regions in mini and in notebooks; the student copy of mini.
- :mod:`grader.course`     the nbgrader course directory (init/release/import/autograde/...).
- :mod:`grader.cli`        ``mini-course``.
- :mod:`grader.notebook_build` building the chapter notebooks from their Markdown sources.
"""
