"""`python -m epdoctor ARGS...` runs the installed binary with ARGS (the same process: its exit
status, signals and terminal are the binary's)."""

import os
import sys

from epdoctor import find_epdoctor_bin


def main() -> None:
    exe = find_epdoctor_bin()
    if sys.platform == "win32":
        import subprocess

        sys.exit(subprocess.call([exe, *sys.argv[1:]]))
    os.execv(exe, [exe, *sys.argv[1:]])


if __name__ == "__main__":
    main()
