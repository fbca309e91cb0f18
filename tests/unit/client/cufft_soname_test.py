"""cuFFT reaches the client however the application finds it (client/entry/library_sonames.cc),
run with the client preloaded and no tallyd:
- a dlopen("libcufft.so.12") by name, after NVIDIA's copy was loaded by its full path (what JAX's
  CUDA plugin does before XLA opens cuFFT by name), answers with libtally_cufft.so, and a lookup
  in that handle finds the client's functions;
- a call through it goes to the client's forwarding (no tallyd: CUFFT_SETUP_FAILED, where NVIDIA's
  cuFFT would answer its version), and a cufftXt function the client does not forward answers
  CUFFT_NOT_SUPPORTED;
- TALLY_CUFFT=0 leaves the by-name lookup to NVIDIA's copy.

    LD_PRELOAD=libtally_client.so TALLY_SERVER=unix:/nonexistent python3 cufft_soname_test.py REAL_LIBCUFFT
"""
import ctypes
import os
import subprocess
import sys

CUFFT_SETUP_FAILED = 7
CUFFT_NOT_SUPPORTED = 16


class DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def file_defining(function):
    info = DlInfo()
    libc = ctypes.CDLL(None)
    assert libc.dladdr(ctypes.cast(function, ctypes.c_void_p), ctypes.byref(info)) != 0, "dladdr failed"
    return os.path.basename(os.path.realpath(info.dli_fname.decode()))


def main():
    real = sys.argv[1]
    have_real = os.path.exists(real)
    if have_real:
        ctypes.CDLL(real, mode=os.RTLD_LOCAL)  # NVIDIA's copy, by its full path, first
    by_name = ctypes.CDLL("libcufft.so.12")
    where = file_defining(by_name.cufftCreate)
    if os.environ.get("TALLY_CUFFT") == "0":
        if have_real:
            assert where.startswith("libcufft.so.12"), f"TALLY_CUFFT=0: cufftCreate found in {where}"
        print("ok: TALLY_CUFFT=0 leaves cuFFT alone")
        return
    assert where == "libtally_client.so", f"cufftCreate by name resolves to {where}, not the client"
    version = ctypes.c_int(-1)
    status = by_name.cufftGetVersion(ctypes.byref(version))
    assert status == CUFFT_SETUP_FAILED, f"cufftGetVersion without tallyd answered {status} (version {version.value})"
    assert by_name.cufftXtSetGPUs(1, 1, None) == CUFFT_NOT_SUPPORTED, "cufftXtSetGPUs must be a NotSupported stub"
    if have_real:
        off = subprocess.run([sys.executable, __file__, real], env=dict(os.environ, TALLY_CUFFT="0"))
        assert off.returncode == 0, "the TALLY_CUFFT=0 run failed"
    print(f"ok: cuFFT by name reaches the client{' (NVIDIA copy loaded first)' if have_real else ''}")


if __name__ == "__main__":
    main()
