"""Helpers shared by the PyTorch suite cases (tests/pytorch/cases/*.py); not a case itself.

A case makes a Case, runs named sub-steps with case.step(...) and ends with
sys.exit(case.finish()), which prints ONE JSON object as the last stdout line:

  {"case": "matmul", "ok": true, "info": {...},
   "steps": [{"name": "cublas_fp32", "ok": true, "error": null, "tol": null,
              "result": {...}, "seconds": 0.12}, ...]}

tests/pytorch/compare.py compares "result" of each step with the native run's:
  "tol": null              -> bit for bit (the step is deterministic);
  "tol": {"rtol", "atol"}  -> floats may differ by atol + rtol*|native|; ints, strings, bools
                              stay exact. sha256 digests are dropped from such steps (they
                              would make the tolerance pointless).
"info" and "seconds" are for the log only, never compared.

Every step catches its own exception, so one unsupported feature does not hide the others;
the case still fails (exit 1) when any step failed.
"""

import hashlib
import json
import os
import random
import sys
import time
import traceback

SEED = 1234


def setup_determinism(seed=SEED):
    """Everything the suite needs for bitwise-reproducible CUDA results. Call before any CUDA
    work. The runner also sets CUBLAS_WORKSPACE_CONFIG; the default here covers manual runs
    (it must be set before cuBLAS creates its first handle)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    random.seed(seed)
    torch.manual_seed(seed)  # seeds the CPU and every CUDA generator
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    # TF32 would still be deterministic, but fp32 results are also checked against the CPU.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    return torch


def cpu_gen(seed):
    """A seeded CPU generator: inputs are made on the CPU and copied over, so they do not
    depend on any GPU code path."""
    import torch
    return torch.Generator().manual_seed(seed)


def tensor_bytes(t):
    import torch
    flat = t.detach().cpu().contiguous().reshape(-1)
    if flat.dtype.is_complex:
        flat = torch.view_as_real(flat).reshape(-1)
    raw = flat.view(torch.uint8)
    try:
        return raw.numpy().tobytes()
    except Exception:  # numpy missing: slower, same bytes
        return bytes(raw.tolist())


def summary(t, first=8):
    """A tensor reduced to a small JSON object: shape, dtype, digest of the exact bytes, and a
    few statistics computed in float64 on the CPU (readable in a diff, used by tolerances)."""
    import torch
    c = t.detach().cpu().contiguous()
    out = {"shape": list(c.shape), "dtype": str(c.dtype).replace("torch.", ""),
           "sha256": hashlib.sha256(tensor_bytes(c)).hexdigest()}
    if c.numel() == 0:
        return out
    flat = c.reshape(-1)
    if flat.dtype.is_complex:
        flat = torch.view_as_real(flat).reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.to(torch.int64)
    d = flat.to(torch.float64)
    if flat.dtype.is_floating_point:
        finite = torch.isfinite(d)
        out["nonfinite"] = int((~finite).sum())
        out["first"] = [float(v) for v in d[:first].tolist()]
        d = torch.where(finite, d, torch.zeros_like(d))
    else:
        out["first"] = [int(v) for v in flat[:first].tolist()]
    out["mean"] = float(d.mean())
    out["mean_abs"] = float(d.abs().mean())
    out["max_abs"] = float(d.abs().max())
    return out


def jsonable(x):
    """Tensors -> summary(); tuples -> lists; numpy/torch scalars -> Python numbers."""
    try:
        import torch
        if isinstance(x, torch.Tensor):
            return summary(x)
        if isinstance(x, (torch.dtype, torch.device, torch.Size)):
            return list(x) if isinstance(x, torch.Size) else str(x)
    except ImportError:
        pass
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (bool, int, float, str)) or x is None:
        return x
    if hasattr(x, "item"):
        return x.item()
    return str(x)


def _drop_digests(x):
    if isinstance(x, dict):
        return {k: _drop_digests(v) for k, v in x.items() if k != "sha256"}
    if isinstance(x, list):
        return [_drop_digests(v) for v in x]
    return x


def error_text(e, limit=400):
    """Type and first line of the message (PyTorch appends generic advice on later lines; the
    full traceback goes to stderr)."""
    lines = [l.strip() for l in str(e).splitlines() if l.strip()]
    text = f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__
    return text if len(text) <= limit else text[:limit] + " ..."


def assert_close(actual, expected, rtol, atol, what):
    """Self-check inside a case (e.g. GPU vs. CPU); raises AssertionError with the worst element."""
    import torch
    a = actual.detach().cpu().double()
    e = expected.detach().cpu().double()
    if a.shape != e.shape:
        raise AssertionError(f"{what}: shape {list(a.shape)} != {list(e.shape)}")
    diff = (a - e).abs()
    bad = diff > atol + rtol * e.abs()
    if bool(bad.any()) or not bool(torch.isfinite(a).all()):
        i = int((diff - rtol * e.abs()).reshape(-1).nan_to_num(float("inf")).argmax())
        raise AssertionError(f"{what}: {int(bad.sum())} of {a.numel()} elements off "
                             f"(worst at {i}: {a.reshape(-1)[i].item()!r} vs {e.reshape(-1)[i].item()!r}, "
                             f"rtol {rtol}, atol {atol})")


class Case:
    def __init__(self, name):
        self.name = name
        self.steps = []
        self.info = {"pid": os.getpid(), "through_tally": "libtally_client" in os.environ.get("LD_PRELOAD", ""),
                     "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")}
        self._ok = {}
        self._t0 = time.time()
        self._rendezvous = os.environ.get("SUITE_RENDEZVOUS")  # "DIR:N", set by the suite's pair run

    def _meet(self):
        """Waits (at most 120 s) until N processes have built their models, so that the pair's
        tenants run their GPU work at the same time; records when this process's work began."""
        where, _, count = self._rendezvous.rpartition(":")
        self._rendezvous = None
        open(os.path.join(where, str(os.getpid())), "w").close()
        deadline = time.time() + 120
        while len(os.listdir(where)) < int(count) and time.time() < deadline:
            time.sleep(0.05)
        self.info["rendezvous"] = "met" if len(os.listdir(where)) >= int(count) else "timed out"
        self.info["work_began"] = time.time()

    def step(self, name, fn, rtol=None, atol=None, needs=()):
        """Runs fn() as sub-step `name`; returns its result or None. `needs`: names of earlier
        steps that must have passed (else this one fails as not run, naming them)."""
        rec = {"name": name, "ok": False, "error": None,
               "tol": None if rtol is None and atol is None else {"rtol": rtol or 0.0, "atol": atol or 0.0},
               "result": None, "seconds": None}
        self.steps.append(rec)
        missing = [n for n in needs if not self._ok.get(n)]
        if missing:
            rec["error"] = "not run: needs step(s) that failed: " + ", ".join(missing)
            self._ok[name] = False
            print(f"[{self.name}] step {name}: {rec['error']}", file=sys.stderr)
            return None
        if self._rendezvous and self.steps[:-1]:
            self._meet()  # after the first step (building the model)
        t0 = time.perf_counter()
        value = None
        try:
            value = fn()
            import torch
            if torch.cuda.is_initialized():
                torch.cuda.synchronize()  # an asynchronous error belongs to this step
            result = jsonable(value)
            rec["result"] = _drop_digests(result) if rec["tol"] else result
            rec["ok"] = True
        except Exception as e:  # noqa: BLE001 - every failure is reported, none stops the case
            rec["error"] = error_text(e)
            print(f"[{self.name}] step {name} FAILED: {rec['error']}", file=sys.stderr)
            traceback.print_exc(file=sys.stderr)
            value = None
        rec["seconds"] = round(time.perf_counter() - t0, 4)
        self._ok[name] = rec["ok"]
        sys.stderr.flush()
        return value

    def add_versions(self):
        try:
            import torch
            self.info["torch"] = torch.__version__
            self.info["cuda"] = torch.version.cuda
            self.info["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        except Exception as e:  # noqa: BLE001
            self.info["versions_error"] = error_text(e)

    def finish(self):
        """Prints the result line and returns the exit status (0 only if every step passed)."""
        self.add_versions()
        self.info["wall_s"] = round(time.time() - self._t0, 2)
        self.info["work_ended"] = time.time()
        ok = bool(self.steps) and all(s["ok"] for s in self.steps)
        doc = {"case": self.name, "ok": ok, "info": self.info, "steps": self.steps}
        sys.stderr.flush()
        sys.stdout.write("\n" + json.dumps(doc, allow_nan=True, sort_keys=False) + "\n")
        sys.stdout.flush()
        return 0 if ok else 1
