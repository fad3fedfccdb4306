"""The hidden-check worker: the only grader code that runs next to student code.

The worker runs inside the sandbox (:mod:`grader.sandbox`) with the released student copy of
``mini`` for the chapter.  It receives the submitted notebook's setup and answer cells as
text, runs them in one namespace (so ``@implement("NN.x")`` registers the student's
functions in that ``mini``), and then answers requests from the trusted grader:

- ``call``: call the student's function for a slot on inputs the grader chose, and report
  what came back, what it raised, the inputs afterwards (in-place updates), which input the
  result *is*, which inputs it shares memory with, and gradients after an optional backward;
- ``scenario``: run a named scenario of :mod:`grader.worker.scenarios` (a scripted use of a
  stateful exercise: a training step, a checkpoint save/load, a C++ kernel under threads,
  a graph walk) and report its observations.

Requests and answers are frames of :mod:`grader.worker.codec` (tagged JSON and raw array
buffers; never pickle).  The worker cannot see the checks (``grader/checks`` is not in the
sandbox), the expected values (computed by the trusted grader), the course folder or the
gradebook; whatever it reports is only data that the trusted grader compares with its own
expectations.  This package imports nothing outside itself but numpy and ``mini``.
"""
