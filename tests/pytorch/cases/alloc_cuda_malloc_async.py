# suite-env: PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
"""PyTorch on the stream-ordered allocator (cudaMallocAsync/cudaFreeAsync, memory pools).
Workload: alloc_workload.py."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alloc_workload import run  # noqa: E402

if __name__ == "__main__":
    sys.exit(run("alloc_cuda_malloc_async", "backend:cudaMallocAsync", "cudaMallocAsync"))
