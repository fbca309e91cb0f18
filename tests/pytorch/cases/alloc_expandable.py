# suite-env: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
"""The caching allocator with expandable segments (cuMemCreate/cuMemMap/cuMemSetAccess, the
driver's virtual-memory API). Workload: alloc_workload.py."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alloc_workload import run  # noqa: E402

if __name__ == "__main__":
    sys.exit(run("alloc_expandable", "expandable_segments:True", "native"))
