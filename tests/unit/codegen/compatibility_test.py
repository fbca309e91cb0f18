#!/usr/bin/env python3
"""Checks of gen_compatibility.py's classification: synthetic inputs for the parsing and the
family status, and well-known functions of the built client library for the whole pipeline.
Usage: compatibility_test.py GENERATOR CLIENT_LIBRARY CUDA_INCLUDE CUDNN_INCLUDE NM LIBRARY_STUBS SCRATCH
(LIBRARY_STUBS: the generated library_stubs.cc the library was linked from)."""
import importlib.util
import io
import os
import re
import sys
import unittest
from contextlib import redirect_stderr, redirect_stdout

GEN, LIBRARY, CUDA_INC, CUDNN_INC, NM, LIBRARY_STUBS, SCRATCH = sys.argv[1:8]
del sys.argv[1:8]
sys.path.insert(0, os.path.dirname(GEN))
spec = importlib.util.spec_from_file_location("gen_compatibility", GEN)
gen = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = gen  # its dataclasses look their module up there
spec.loader.exec_module(gen)


class ParsingAndStatus(unittest.TestCase):
    def test_nm_bindings_strong_and_weak_without_symbol_versions(self):
        exports = gen.parse_nm_output(
            "00000000000e4ee0 T cudaMalloc@@libcudart.so.13\n"
            "00000000000e4ef0 W cudaMallocArray@@libcudart.so.13\n"
            "00000000000e4f00 V someWeakObject\n"
            "0000000000000000 A libcudart.so.13\n"
            "garbage\n")
        self.assertEqual(exports["cudaMalloc"], gen.STRONG)
        self.assertEqual(exports["cudaMallocArray"], gen.WEAK)
        self.assertEqual(exports["someWeakObject"], gen.WEAK)
        self.assertNotIn("garbage", exports)

    def test_family_status_is_all_some_or_none(self):
        self.assertEqual(gen.family_status(3, 3), gen.IMPLEMENTED)
        self.assertEqual(gen.family_status(1, 3), gen.PARTIAL)
        self.assertEqual(gen.family_status(0, 3), gen.NOT_SUPPORTED)

    def test_doxygen_groups_open_with_braces_and_nest(self):
        raw = "\n".join([
            "/** \\defgroup OUTER Outer Things",
            " * @{ */",
            "int a;",
            "/** \\defgroup NOBRACE Never Opened */",
            "int b;",
            "/** @} */",
            "int c;",
            "/** \\addtogroup OUTER",
            " * @{ */",
            "int d;",
            "/** @} */",
        ])
        self.assertEqual(gen.doxygen_group_of_each_line(raw),
                         [None, "Outer Things", "Outer Things", "Outer Things", "Outer Things", None, None,
                          None, "Outer Things", "Outer Things", None])


class BuiltLibrary(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.exports = gen.read_exports(LIBRARY, NM)
        cls.model = gen.build(CUDA_INC, CUDNN_INC, cls.exports)
        cls.entries = {e.name: e for e in cls.model.runtime + cls.model.driver}
        cls.library = {f.name: f for f in cls.model.libraries}

    def implemented(self, name):
        return gen.is_implemented(self.entries[name].symbol, self.exports)

    def test_hand_written_runtime_functions_are_implemented(self):
        for name in ("cudaMalloc", "cudaMemcpyAsync", "cudaLaunchKernel", "cudaStreamCreate", "cudaMallocManaged"):
            self.assertTrue(self.implemented(name), name)

    def test_generated_stubs_are_not_supported(self):
        for name in ("cudaImportExternalMemory", "cudaGraphAddExternalSemaphoresSignalNode", "cuImportExternalMemory"):
            self.assertFalse(self.implemented(name), name)

    def test_a_driver_function_has_the_status_of_the_export_the_header_binds(self):
        mem_alloc = self.entries["cuMemAlloc"]
        self.assertEqual(mem_alloc.symbol, "cuMemAlloc_v2")
        self.assertTrue(self.implemented("cuMemAlloc"))
        # The 32-bit generation is a separate export (a stub).
        self.assertEqual(mem_alloc.other_generations, ["cuMemAlloc"])
        self.assertFalse(gen.is_implemented("cuMemAlloc", self.exports))

    def test_per_thread_twins(self):
        self.assertEqual(self.entries["cudaMemcpy"].per_thread, "cudaMemcpy_ptds")
        self.assertEqual(self.entries["cudaMemcpyAsync"].per_thread, "cudaMemcpyAsync_ptsz")
        self.assertEqual(self.entries["cuLaunchKernel"].per_thread, "cuLaunchKernel_ptsz")
        self.assertIsNone(self.entries["cudaMalloc"].per_thread)

    def test_families_follow_the_header_groups(self):
        expected = {
            "cudaMalloc": "Memory Management", "cudaMallocAsync": "Stream Ordered Memory Allocator",
            "cudaStreamCreate": "Stream Management", "cudaGraphLaunch": "Graph Management",
            "cuMemAlloc": "Memory Management", "cuMemCreate": "Virtual Memory Management",
            "cuGraphInstantiateWithFlags": "Graph Management", "cuGreenCtxCreate": "Green Contexts",
        }
        for name, family in expected.items():
            self.assertEqual(self.entries[name].family, family, name)

    def test_every_stubbed_export_belongs_to_one_function(self):
        model = gen.cuda_stubs.build_model(CUDA_INC)
        placed = [s for e in self.entries.values() if e.stubbed
                  for s in [e.symbol, e.per_thread] + e.other_generations if s]
        self.assertEqual(len(placed), len(set(placed)))
        self.assertEqual(set(placed), set(model.runtime) | set(model.driver))

    def test_profiler_functions_come_from_headers_without_stubs(self):
        start = self.entries["cudaProfilerStart"]
        self.assertEqual((start.family, start.stubbed), ("Profiler Control", False))
        self.assertEqual(self.entries["cuProfilerStop"].family, "Profiler Control")
        # Without a stub, a function the library does not define is simply not implemented.
        absent = gen.EntryPoint("cuNoSuchFunction", "Profiler Control", "cuNoSuchFunction", None, [],
                                stubbed=False)
        self.assertFalse(gen.entry_implemented(absent, self.exports))
        with self.assertRaises(gen.CompatibilityError):  # a stubbed one must be in the library
            gen.is_implemented("cuNoSuchFunction", self.exports)

    def test_library_functions(self):
        expected = {
            "cublasCreate_v2": gen.HAND_WRITTEN, "cublasSgemm_v2": gen.FORWARDED,
            "cublasSrotg_v2": gen.STUB, "cublasLtMatmul": gen.HAND_WRITTEN,
            "cublasLtMatrixTransform": gen.STUB, "cudnnConvolutionForward": gen.FORWARDED,
            "cudnnCreate": gen.HAND_WRITTEN, "cudnnFusedOpsExecute": gen.STUB,
        }
        for name, status in expected.items():
            self.assertEqual(self.library[name].status, status, name)
        self.assertEqual(self.library["cublasSgemm_v2"].family, "BLAS3 Functions")
        self.assertEqual(self.library["cublasLtMatmul"].api, "cuBLASLt")

    def test_library_verdicts_match_the_generated_stubs(self):
        # gen_compatibility.py repeats gen_library_stubs.py's decision; the stubs it generated
        # must say the same: a NotSupported stub reports its name, a forwarding one does not.
        with open(LIBRARY_STUBS, encoding="utf-8") as f:
            reported = set(re.findall(r'reportNotSupported\("(\w+)"\)', f.read()))
        for fn in self.model.libraries:
            if fn.status == gen.STUB:
                self.assertIn(fn.name, reported, fn.name)
            elif fn.status == gen.FORWARDED:
                self.assertNotIn(fn.name, reported, fn.name)

    def test_output_is_deterministic_and_machine_independent(self):
        text = gen.render(self.model)
        self.assertEqual(text, gen.render(gen.build(CUDA_INC, CUDNN_INC, self.exports)))
        self.assertIn("do not edit", text)
        self.assertNotIn(os.path.realpath(CUDA_INC), text)
        self.assertNotIn(os.path.dirname(os.path.realpath(LIBRARY)), text)

    def test_check_fails_on_a_hand_edited_copy(self):
        os.makedirs(SCRATCH, exist_ok=True)
        good = os.path.join(SCRATCH, "good.md")
        edited = os.path.join(SCRATCH, "edited.md")
        args = ["--client-library", LIBRARY, "--cuda-include", CUDA_INC, "--cudnn-include", CUDNN_INC,
                "--nm", NM, "--out", os.path.join(SCRATCH, "generated.md")]
        gen.write(good, gen.render(self.model))
        gen.write(edited, gen.render(self.model).replace("| partial |", "| implemented |", 1))
        quiet = io.StringIO()
        with redirect_stdout(quiet), redirect_stderr(quiet):
            self.assertEqual(gen.main(args + ["--check", good]), 0)
            self.assertEqual(gen.main(args + ["--check", edited]), 1)
        self.assertIn(gen.REGENERATE, quiet.getvalue())


if __name__ == "__main__":
    unittest.main(verbosity=2)
