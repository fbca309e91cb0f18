"""Why JAX has (or has not) a CUDA backend: which plugins it discovered, what initializing each
did, and the backends it ended with. A diagnostic to run next to first_steps.py:

    python3 jax_backend_probe.py
"""
import importlib
import logging
import pkgutil
import sys
import traceback

logging.basicConfig(level=logging.DEBUG, stream=sys.stdout)

import jax_plugins  # noqa: E402

for info in pkgutil.iter_modules(jax_plugins.__path__, "jax_plugins."):
    print("plugin module", info.name, flush=True)
    try:
        module = importlib.import_module(info.name)
        if hasattr(module, "_get_library_path"):
            print("  library", module._get_library_path(), flush=True)
    except Exception:
        traceback.print_exc(file=sys.stdout)

import jax  # noqa: E402
from jax._src import xla_bridge  # noqa: E402

try:
    print("devices", jax.devices(), flush=True)
except Exception:
    traceback.print_exc(file=sys.stdout)
print("backend factories", sorted(getattr(xla_bridge, "_backend_factories", {}).keys()), flush=True)
print("backend errors", getattr(xla_bridge, "_backend_errors", None), flush=True)
