"""Parent of one rank, under ``mpiexec`` (used by :mod:`mini.distributed.launch`).

    mpiexec -n 4 python .../_supervise.py RUNDIR python -m mini.distributed.launch --worker RUNDIR

It starts the rank as its child (the child inherits MPI's connection to ``mpiexec``), waits,
and writes ``RUNDIR/exit<rank>`` with how the rank ended ("exit 3", "signal 9").  Its own
exit status is the child's (128 + n for signal n), never a death by signal: MPICH's
``mpiexec`` kills every rank at once when one dies by a signal, before the others can say
which rank it was; an ordinary non-zero exit lets them report it (see watchdog.py).

Run as a script by path, so it imports nothing of mini (it starts in milliseconds).
"""
import os
import signal
import subprocess
import sys


def main(argv) -> int:
    rundir, child_argv = argv[0], argv[1:]
    rank = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "x"
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)   # mpiexec's "a rank failed" notice
    child = subprocess.Popen(child_argv, close_fds=False)

    def forward(signum, frame):
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, forward)
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:
            continue
    how = f"signal {-code}" if code < 0 else f"exit {code}"
    try:
        with open(os.path.join(rundir, f"exit{rank}"), "w") as f:
            f.write(f"{how} {child.pid}\n")
    except OSError:
        pass
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
