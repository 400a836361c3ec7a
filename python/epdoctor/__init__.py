"""epdoctor: triage and reproduce NCCL, PyTorch distributed, NVSHMEM and DeepEP warnings.

The package carries the `epdoctor` binary (installed into the environment's `bin/`); this module
only finds it, for `python -m epdoctor`.
"""

import os
import shutil
import sys
import sysconfig


def find_epdoctor_bin() -> str:
    """The path of the `epdoctor` binary this package installed."""
    exe = "epdoctor" + (sysconfig.get_config_var("EXE") or "")
    schemes = [None]
    if sys.version_info >= (3, 10):
        schemes.append(sysconfig.get_preferred_scheme("user"))
    elif os.name == "posix":
        schemes.append("posix_user")
    for scheme in schemes:
        d = sysconfig.get_path("scripts") if scheme is None else sysconfig.get_path("scripts", scheme)
        path = os.path.join(d, exe)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    # A virtual environment's bin/, beside its interpreter.
    path = os.path.join(os.path.dirname(sys.executable), exe)
    if os.path.isfile(path) and os.access(path, os.X_OK):
        return path
    found = shutil.which(exe)
    if found:
        return found
    raise FileNotFoundError(f"the {exe} binary of this package is not installed (looked in {sysconfig.get_path('scripts')})")
