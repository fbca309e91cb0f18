"""First steps of a framework that carries its own CUDA runtime (CuPy, JAX): array operations,
a matmul, a kernel of the application's own, an FFT. Prints only values that a native run and a
run through tallyd must agree on (rounded to 6 significant digits), one per line, and exits
non-zero when the framework does not run on the GPU (JAX silently falls back to the CPU).

    python3 first_steps.py cupy|jax
"""
import logging
import sys

logging.basicConfig(level=logging.WARNING)  # a framework's own warnings say why it left the GPU


def show(name, value):
    print(f"{name} {float(value):.6g}", flush=True)


def cupy_steps():
    import cupy as cp

    print("devices", cp.cuda.runtime.getDeviceCount(), flush=True)
    a = cp.arange(1 << 20, dtype=cp.float32)
    show("elementwise_sum", (a * 2 + 1).sum())
    m = cp.arange(256 * 256, dtype=cp.float32).reshape(256, 256) / 65536
    show("matmul_sum", (m @ m.T).sum())
    twice = cp.RawKernel(
        r'extern "C" __global__ void twice(float* x, int n) {'
        r' int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }',
        "twice")
    x = cp.arange(1000, dtype=cp.float32)
    twice((4,), (256,), (x, cp.int32(1000)))
    show("raw_kernel_sum", x.sum())
    spectrum = cp.fft.fft(cp.sin(cp.arange(1024, dtype=cp.float64) * 0.1))
    show("fft_abs_max", cp.abs(spectrum).max())
    cp.cuda.Device().synchronize()


def jax_steps():
    import jax
    import jax.numpy as jnp

    try:
        jax.devices("cuda")
    except RuntimeError as e:  # JAX would fall back to the CPU without a word: say why not
        sys.exit(f"JAX has no CUDA backend: {e}")
    device = jax.devices()[0]
    print("platform", device.platform, flush=True)
    if device.platform != "gpu":
        sys.exit(f"JAX runs on {device.platform}, not on the GPU")
    a = jnp.arange(1 << 20, dtype=jnp.float32)
    show("elementwise_sum", (a * 2 + 1).sum())
    m = jnp.arange(256 * 256, dtype=jnp.float32).reshape(256, 256) / 65536
    show("matmul_sum", (m @ m.T).sum())

    @jax.jit
    def own_kernel(v):  # a fused kernel XLA compiles for this program
        return jnp.where(v > 500, v * 2, -v).cumsum()[-1]

    show("jit_kernel", own_kernel(jnp.arange(1000, dtype=jnp.float32)))
    spectrum = jnp.fft.fft(jnp.sin(jnp.arange(1024, dtype=jnp.float32) * 0.1))
    show("fft_abs_max", jnp.abs(spectrum).max())


if __name__ == "__main__":
    steps = {"cupy": cupy_steps, "jax": jax_steps}
    if len(sys.argv) != 2 or sys.argv[1] not in steps:
        sys.exit("usage: first_steps.py cupy|jax")
    steps[sys.argv[1]]()
    print("done", flush=True)
