#!/usr/bin/env python3
"""Golden checks of gen_library_stubs.py's classification: how the parameters of the cuBLAS and
cuDNN functions PyTorch calls travel, which calls are one-way, and that generating twice gives
the same bytes. Usage: library_kinds_test.py GENERATOR CUDA_INCLUDE CUDNN_INCLUDE SCRATCH"""
import filecmp
import importlib.util
import os
import subprocess
import sys
import unittest

GEN, CUDA_INC, CUDNN_INC, SCRATCH = sys.argv[1:5]
del sys.argv[1:5]
spec = importlib.util.spec_from_file_location("gen", GEN)
gen = importlib.util.module_from_spec(spec)
sys.path.insert(0, os.path.dirname(GEN))
spec.loader.exec_module(gen)


def classified():
    enums = gen.enum_types([os.path.join(CUDA_INC, h) for h in gen.CUBLAS_HEADERS + gen.CUBLASLT_HEADERS] +
                           [os.path.join(CUDNN_INC, h) for h in gen.CUDNN_HEADERS] +
                           [os.path.join(CUDA_INC, "library_types.h")])
    out = {}
    for family, headers, inc in (("cublas", gen.CUBLAS_HEADERS, CUDA_INC), ("cudnn", gen.CUDNN_HEADERS, CUDNN_INC)):
        for h in headers:
            for fn in gen.parse_header(os.path.join(inc, h), family):
                gen.classify(fn, enums)
                out[fn.name] = fn
    return out


FUNCTIONS = classified()


def kinds(name):
    fn = FUNCTIONS[name]
    return dict(zip((p.name for p in fn.params), fn.kinds))


class Classification(unittest.TestCase):
    def test_sgemm_scalars_follow_the_pointer_mode_and_matrices_are_device_memory(self):
        k = kinds("cublasSgemm_v2")
        self.assertEqual(k["handle"], "handle")
        self.assertEqual((k["alpha"], k["beta"]), ("scalar", "scalar"))
        self.assertEqual((k["A"], k["B"], k["C"]), ("device", "device", "device"))
        self.assertEqual(k["lda"], "value")
        self.assertTrue(gen.one_way(FUNCTIONS["cublasSgemm_v2"]))

    def test_gemm_ex_takes_void_scalars_and_enums_by_value(self):
        k = kinds("cublasGemmEx")
        self.assertEqual(k["alpha"], "scalar")
        self.assertEqual((k["Atype"], k["computeType"], k["algo"]), ("value", "value", "value"))

    def test_batched_gemm_pointer_arrays_live_in_device_memory(self):
        self.assertEqual(kinds("cublasSgemmBatched")["Aarray"], "device")

    def test_a_host_result_is_an_output_and_makes_a_round_trip(self):
        self.assertEqual(kinds("cublasSdot_v2")["result"], "scalarOut")
        self.assertEqual(kinds("cublasGetVersion_v2")["version"], "hostOut")
        self.assertFalse(gen.one_way(FUNCTIONS["cublasGetVersion_v2"]))

    def test_cudnn_descriptors_are_objects_created_under_client_ids(self):
        self.assertEqual(kinds("cudnnCreateTensorDescriptor")["tensorDesc"], "objectOut")
        self.assertTrue(gen.one_way(FUNCTIONS["cudnnCreateTensorDescriptor"]))
        self.assertEqual(kinds("cudnnDestroyTensorDescriptor")["tensorDesc"], "object")

    def test_dimension_arrays_carry_their_count(self):
        k = kinds("cudnnSetTensorNdDescriptor")
        self.assertEqual((k["dimA"], k["strideA"]), ("arrayIn:nbDims", "arrayIn:nbDims"))
        k = kinds("cudnnGetTensorNdDescriptor")
        self.assertEqual((k["dimA"], k["nbDims"]), ("arrayOut:nbDimsRequested", "hostOut"))

    def test_cudnn_scaling_factors_are_host_bytes(self):
        k = kinds("cudnnBatchNormalizationForwardTrainingEx")
        self.assertEqual((k["alpha"], k["beta"]), ("hostScalar", "hostScalar"))
        self.assertEqual(k["xData"], "device")
        self.assertTrue(gen.one_way(FUNCTIONS["cudnnBatchNormalizationForwardTrainingEx"]))

    def test_rnn_sequence_lengths_on_the_device_and_on_the_host(self):
        self.assertEqual(kinds("cudnnRNNForward")["devSeqLengths"], "device")
        self.assertEqual(kinds("cudnnSetRNNDataDescriptor")["seqLengthArray"], "arrayIn:batchSize")

    def test_every_pytorch_function_is_forwarded(self):
        for name in ("cublasSgemm_v2", "cublasGemmEx", "cudnnSetTensorNdDescriptor", "cudnnCreateTensorDescriptor",
                     "cudnnDestroyTensorDescriptor", "cudnnBatchNormalizationForwardInference",
                     "cudnnBatchNormalizationBackwardEx", "cudnnGetBatchNormalizationTrainingExReserveSpaceSize",
                     "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize",
                     "cudnnGetBatchNormalizationBackwardExWorkspaceSize"):
            self.assertIsNotNone(FUNCTIONS[name].kinds, f"{name}: {FUNCTIONS[name].reason}")

    def test_only_gpu_work_goes_through_the_scheduler(self):
        for name in ("cublasSgemm_v2", "cublasGemmEx", "cudnnConvolutionForward",
                     "cudnnBatchNormalizationForwardTrainingEx", "cudnnRNNForward"):
            self.assertTrue(gen.is_work(FUNCTIONS[name]), name)
        for name in ("cudnnSetTensorNdDescriptor", "cudnnCreateTensorDescriptor", "cublasGetVersion_v2",
                     "cudnnGetConvolutionForwardWorkspaceSize", "cublasSetVector"):
            if name in FUNCTIONS and FUNCTIONS[name].kinds is not None:
                self.assertFalse(gen.is_work(FUNCTIONS[name]), name)

    def test_pytorchs_size_queries_are_answered_from_the_client_cache(self):
        for name in ("cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize",
                     "cudnnGetBatchNormalizationBackwardExWorkspaceSize",
                     "cudnnGetBatchNormalizationTrainingExReserveSpaceSize",
                     "cudnnGetConvolutionForwardWorkspaceSize"):
            self.assertEqual(gen.cache_role(FUNCTIONS[name]), "kSizeQuery", name)
        # Not on plain descriptors only: the RNN's state changes outside cudnnSet* calls.
        self.assertIsNone(gen.cache_role(FUNCTIONS["cudnnGetRNNTempSpaceSizes"]))

    def test_every_call_that_changes_a_plain_descriptor_updates_its_cached_contents(self):
        # A change the cache missed would answer later queries from stale contents.
        for name, fn in FUNCTIONS.items():
            if fn.family != "cudnn" or not fn.params or fn.params[0].base not in gen.PLAIN_DESCRIPTORS:
                continue
            if "Get" in name or name.startswith("cudnnCreate") or fn.kinds is None:
                continue
            self.assertIn(gen.cache_role(fn), ("kSetsDescriptor", "kDestroysDescriptor"), name)

    def test_ids_do_not_collide(self):
        ids = [gen.fnv1a(n) for n in FUNCTIONS]
        self.assertEqual(len(ids), len(set(ids)))

    def test_generation_is_deterministic(self):
        outs = []
        for i in (1, 2):
            d = os.path.join(SCRATCH, f"run{i}")
            subprocess.run([sys.executable, GEN, "--cuda-include", CUDA_INC, "--cudnn-include", CUDNN_INC,
                            "--client-out", d, "--server-out", d], check=True)
            outs.append(d)
        for f in ("library_stubs.cc", "library_exec.cc"):
            self.assertTrue(filecmp.cmp(os.path.join(outs[0], f), os.path.join(outs[1], f), shallow=False), f)


if __name__ == "__main__":
    unittest.main()
