"""Run a command and write its peak resident memory (KiB) to a file:
``python -m tests.peak_rss OUT COMMAND...``, exiting with the command's status.

Started from this small process, the command's ``ru_maxrss`` is its own. Waited for directly
by the test process, it would not be: Linux keeps across ``exec`` the peak of the memory a
process had before it, and a child that ``subprocess`` starts with ``vfork`` shares its
parent's memory until then, so a crawl started from an 800 MiB pytest worker "peaks" at
800 MiB before it has done anything."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main() -> int:
    out, *command = sys.argv[1:]
    pid = os.fork()
    if pid == 0:
        os.execvp(command[0], command)
    _, status, usage = os.wait4(pid, 0)
    Path(out).write_text(str(usage.ru_maxrss))
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
