// How tallyd reads a forwarded cuBLAS/cuDNN call (server/library): a tenant names only its own
// handles and descriptors, and only as the type they were created as; every address must be its
// device memory; host arrays must hold as many elements as the library will read; bytes that do
// not follow the layout mark the call malformed. No GPU and no library: every refused call is
// answered before the library would be loaded.
#include "common/library/arg_buffer.h"
#include "common/library/cudnn_attributes.h"
#include "server/library/library_call.h"
#include "server/session/tenant.h"

#include <cublas_api.h>
#include <cudnn.h>
#include <gtest/gtest.h>

#include <random>
#include <set>

namespace tally::server::library {
namespace {

using tally::library::ArgWriter;
using tally::library::ScalarPlace;

gpu::Gpu* fakeGpu() { return reinterpret_cast<gpu::Gpu*>(uintptr_t{0x10}); }

struct LibraryCallTest : testing::Test {
  session::Tenant tenant{7, "tenant-7", session::PriorityClass::kBestEffort, {}};
  ArgWriter args;
  std::string bytes;

  LibraryCall call(Library lib = Library::kCublas) {
    bytes = args.bytes();
    return LibraryCall(tenant, *fakeGpu(), lib, "test", ArgReader(bytes.data(), bytes.size()),
                       [](uint64_t) { return static_cast<session::StreamState*>(nullptr); });
  }
  // The fake GPU cannot free anything: the ranges go before the tenant does.
  void TearDown() override {
    tenant.memory().takeAll();
    tenant.libraryObjects().takeAll();
  }
  void own(uint64_t address, uint64_t size) { tenant.memory().addAllocation(address, size, fakeGpu()); }
  void addObject(uint64_t id, uint32_t type) { ASSERT_TRUE(tenant.libraryObjects().insert(id, {type, reinterpret_cast<void*>(id), nullptr, nullptr, 0, {}})); }
};

TEST_F(LibraryCallTest, AddressesMustBeTheTenantsMemory) {
  own(0x10000, 0x1000);
  args.put(uint64_t{0x10800});  // inside
  args.put(uint64_t{0x20000});  // someone else's
  LibraryCall c = call();
  EXPECT_EQ(c.device(), reinterpret_cast<void*>(0x10800));
  EXPECT_TRUE(c.refusalReason().empty());
  EXPECT_EQ(c.device(), nullptr);
  EXPECT_TRUE(c.refused());
  EXPECT_FALSE(c.malformed());
  EXPECT_EQ(c.refusal(), CUBLAS_STATUS_INVALID_VALUE);
}

TEST_F(LibraryCallTest, NullAddressesPassForOptionalArguments) {
  args.put(uint64_t{0});
  LibraryCall c = call();
  EXPECT_EQ(c.device(), nullptr);
  EXPECT_FALSE(c.refused());
}

TEST_F(LibraryCallTest, ARangeMustLieWhollyInsideAnAllocation) {
  own(0x10000, 0x1000);
  LibraryCall c = call();
  EXPECT_NE(c.ownedRange(0x10000, 0x1000, "workspace"), nullptr);
  EXPECT_FALSE(c.refused());
  EXPECT_EQ(c.ownedRange(0x10800, 0x1000, "workspace"), nullptr);
  EXPECT_TRUE(c.refused());
}

TEST_F(LibraryCallTest, ObjectsAreNamedOnlyAsTheTypeTheyWereCreatedAs) {
  const uint32_t tensor = functionId("cudnnTensorDescriptor_t");
  const uint32_t filter = functionId("cudnnFilterDescriptor_t");
  addObject(0x100, tensor);
  args.put(uint64_t{0x100});
  args.put(uint64_t{0x100});
  args.put(uint64_t{0x999});
  LibraryCall c = call(Library::kCudnn);
  EXPECT_EQ(c.object(tensor), reinterpret_cast<void*>(0x100));
  EXPECT_TRUE(c.refusalReason().empty());
  EXPECT_EQ(c.object(filter), nullptr);  // a tensor descriptor passed as a filter
  EXPECT_FALSE(c.refusalReason().empty());
  EXPECT_EQ(c.object(tensor), nullptr);  // an id never created
  EXPECT_TRUE(c.refused());
  EXPECT_EQ(c.refusal(), CUDNN_STATUS_BAD_PARAM);
}

TEST_F(LibraryCallTest, AnotherTenantsHandleIdIsUnknownHere) {
  session::Tenant other{8, "tenant-8", session::PriorityClass::kBestEffort, {}};
  ASSERT_TRUE(other.libraryObjects().insert(0x42, {kCublasHandleType, reinterpret_cast<void*>(1), nullptr, nullptr, 0, {}}));
  args.put(uint64_t{0x42});
  LibraryCall c = call();
  EXPECT_EQ(c.handle(kCublasHandleType), nullptr);
  EXPECT_TRUE(c.refused());
}

TEST_F(LibraryCallTest, HostScalarsTravelAsBytesAndDeviceScalarsAsOwnedAddresses) {
  own(0x10000, 0x100);
  float alpha = 2.5f;
  args.put(ScalarPlace::kHost);
  args.putBytes(&alpha, sizeof alpha);
  args.put(ScalarPlace::kDevice);
  args.put(uint64_t{0x10010});
  args.put(ScalarPlace::kDevice);
  args.put(uint64_t{0x90000});
  LibraryCall c = call();
  const void* host = c.scalar();
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(*static_cast<const float*>(host), 2.5f);
  EXPECT_EQ(c.scalar(), reinterpret_cast<const void*>(0x10010));
  EXPECT_TRUE(c.refusalReason().empty());
  EXPECT_EQ(c.scalar(), nullptr);
  EXPECT_TRUE(c.refused());
}

TEST_F(LibraryCallTest, AHostArrayMustHoldEveryElementTheLibraryWillRead) {
  int dims[4] = {1, 2, 3, 4};
  args.put(uint8_t{1});
  args.putBytes(dims, sizeof dims);
  args.put(uint8_t{1});
  args.putBytes(dims, 2 * sizeof(int));
  LibraryCall c = call(Library::kCudnn);
  const void* full = c.arrayIn(4, sizeof(int));
  ASSERT_NE(full, nullptr);
  EXPECT_EQ(static_cast<const int*>(full)[3], 4);
  EXPECT_TRUE(c.refusalReason().empty());
  EXPECT_EQ(c.arrayIn(4, sizeof(int)), nullptr);  // two elements sent, four to be read
  EXPECT_TRUE(c.refused());
}

TEST_F(LibraryCallTest, OutputsComeBackInParameterOrder) {
  args.put(uint8_t{1});
  args.put(uint8_t{0});  // a null output pointer: the library gets nullptr
  args.put(uint8_t{1});
  LibraryCall c = call(Library::kCudnn);
  auto* first = static_cast<int32_t*>(c.hostOut(sizeof(int32_t)));
  EXPECT_EQ(c.hostOut(sizeof(int64_t)), nullptr);
  auto* second = static_cast<int64_t*>(c.arrayOut(2, sizeof(int64_t)));
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  *first = 5;
  second[0] = 6;
  second[1] = 7;
  std::string out = c.outputBytes();
  ASSERT_EQ(out.size(), sizeof(int32_t) + 2 * sizeof(int64_t));
  int64_t last = 0;
  std::memcpy(&last, out.data() + sizeof(int32_t) + sizeof(int64_t), sizeof last);
  EXPECT_EQ(last, 7);
}

TEST_F(LibraryCallTest, TruncatedOrTrailingBytesMakeTheCallMalformed) {
  args.put(uint32_t{1});  // half of an id
  LibraryCall truncated = call();
  truncated.readId();
  EXPECT_TRUE(truncated.malformed());

  args.bytes().clear();
  args.put(uint64_t{0});
  args.put(uint8_t{9});  // a byte no parameter reads
  LibraryCall trailing = call();
  trailing.readId();
  EXPECT_TRUE(trailing.malformed());
}

TEST_F(LibraryCallTest, CreatedObjectsAreRegisteredOnlyWhenTheLibrarySucceeds) {
  const uint32_t tensor = functionId("cudnnTensorDescriptor_t");
  args.put(uint64_t{0x500});
  LibraryCall failed = call(Library::kCudnn);
  *static_cast<void**>(failed.objectOut(tensor, nullptr)) = reinterpret_cast<void*>(0xabc);
  EXPECT_EQ(failed.complete(CUDNN_STATUS_BAD_PARAM), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(tenant.libraryObjects().find(0x500, tensor), nullptr);

  LibraryCall made = call(Library::kCudnn);
  *static_cast<void**>(made.objectOut(tensor, nullptr)) = reinterpret_cast<void*>(0xabc);
  EXPECT_EQ(made.complete(CUDNN_STATUS_SUCCESS), CUDNN_STATUS_SUCCESS);
  ASSERT_NE(tenant.libraryObjects().find(0x500, tensor), nullptr);
  EXPECT_EQ(tenant.libraryObjects().find(0x500, tensor)->object, reinterpret_cast<void*>(0xabc));

  LibraryCall again = call(Library::kCudnn);  // the same id a second time
  again.objectOut(tensor, nullptr);
  EXPECT_TRUE(again.refused());
}

// A tenant stream moves between SM partitions (a new driver stream); the library's kernels must
// follow it, so every call through a handle re-points the handle at the stream's driver stream.
std::vector<CUstream> boundStreams;
int recordBind(void*, CUstream stream) {
  boundStreams.push_back(stream);
  return 0;
}

TEST_F(LibraryCallTest, AHandleFollowsItsStreamWhenTheStreamMoves) {
  session::StreamState stream;
  stream.stream = reinterpret_cast<CUstream>(uintptr_t{0xa0});
  session::LibraryObject handle{kCublasHandleType, reinterpret_cast<void*>(0x42), nullptr, nullptr, 0x10000, {}};
  handle.bindStream = &recordBind;
  handle.boundStream = stream.stream;
  ASSERT_TRUE(tenant.libraryObjects().insert(0x42, handle));
  boundStreams.clear();
  auto callWith = [&] {
    bytes = args.bytes();
    return LibraryCall(tenant, *fakeGpu(), Library::kCublas, "test", ArgReader(bytes.data(), bytes.size()),
                       [&](uint64_t id) { return id == 0x10000 ? &stream : nullptr; });
  };
  args.put(uint64_t{0x42});
  LibraryCall unmoved = callWith();
  EXPECT_EQ(unmoved.handle(kCublasHandleType), reinterpret_cast<void*>(0x42));
  EXPECT_TRUE(boundStreams.empty());  // already there: no library call

  stream.stream = reinterpret_cast<CUstream>(uintptr_t{0xb0});  // moved to a partition
  LibraryCall moved = callWith();
  EXPECT_EQ(moved.handle(kCublasHandleType), reinterpret_cast<void*>(0x42));
  EXPECT_FALSE(moved.refused());
  ASSERT_EQ(boundStreams.size(), 1u);
  EXPECT_EQ(boundStreams[0], stream.stream);
  EXPECT_EQ(tenant.libraryObjects().find(0x42, kCublasHandleType)->boundStream, stream.stream);
  EXPECT_EQ(moved.workStream(), &stream);
}

TEST_F(LibraryCallTest, ObjectsAreReleasedNewestFirst) {
  session::LibraryObjectTable table;
  ASSERT_TRUE(table.insert(30, {1, reinterpret_cast<void*>(30), nullptr, nullptr, 0, {}}));
  ASSERT_TRUE(table.insert(10, {1, reinterpret_cast<void*>(10), nullptr, nullptr, 0, {}}));
  ASSERT_TRUE(table.insert(20, {1, reinterpret_cast<void*>(20), nullptr, nullptr, 0, {}}));
  ASSERT_TRUE(table.erase(10));
  std::vector<session::LibraryObject> all = table.takeAll();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].object, reinterpret_cast<void*>(20));
  EXPECT_EQ(all[1].object, reinterpret_cast<void*>(30));
  EXPECT_EQ(table.size(), 0u);
}

TEST(LibraryExecutors, EveryPyTorchFunctionHasAnExecutor) {
  // The cuBLAS, cuBLASLt and cuDNN functions stock PyTorch 2.11 calls (research notes).
  for (const char* name :
       {"cublasCreate_v2", "cublasSetStream_v2", "cublasSetWorkspace_v2", "cublasSetMathMode", "cublasSgemm_v2",
        "cublasGemmEx", "cublasLtCreate", "cublasLtMatmul", "cublasLtMatmulAlgoGetHeuristic", "cudnnCreate",
        "cudnnSetStream", "cudnnBackendCreateDescriptor", "cudnnBackendSetAttribute", "cudnnBackendGetAttribute",
        "cudnnBackendFinalize", "cudnnBackendExecute", "cudnnBackendDestroyDescriptor", "cudnnCreateTensorDescriptor",
        "cudnnSetTensorNdDescriptor", "cudnnDestroyTensorDescriptor", "cudnnBatchNormalizationForwardInference",
        "cudnnBatchNormalizationForwardTrainingEx", "cudnnBatchNormalizationBackwardEx",
        "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize", "cudnnGetBatchNormalizationBackwardExWorkspaceSize",
        "cudnnGetBatchNormalizationTrainingExReserveSpaceSize", "cudnnRNNForward", "cudnnSetRNNDescriptor_v8",
        "cublasSgemmStridedBatched", "cublasGemmStridedBatchedEx", "cublasDgemv_v2", "cublasZaxpy_v2",
        "cublasSdot_v2", "cublasDnrm2_v2", "cublasCscal_v2"}) {
    const Executor* e = findExecutor(functionId(name));
    ASSERT_NE(e, nullptr) << name;
    EXPECT_STREQ(e->name, name);
  }
}

TEST(CudnnAttributes, ElementSizesFollowTheAttributeType) {
  using namespace tally::library;
  EXPECT_EQ(cudnnElementSize(CUDNN_TYPE_BACKEND_DESCRIPTOR), 8);
  EXPECT_EQ(cudnnElementSize(CUDNN_TYPE_VOID_PTR), 8);
  EXPECT_EQ(cudnnElementSize(CUDNN_TYPE_BOOLEAN), static_cast<int>(sizeof(bool)));
  EXPECT_EQ(cudnnElementSize(CUDNN_TYPE_FLOAT), 4);
  EXPECT_EQ(cudnnElementSize(CUDNN_TYPE_DOUBLE), 8);
  EXPECT_EQ(cudnnElementSize(CUDNN_TYPE_INT64), 8);
  EXPECT_EQ(cudnnElementSize(CUDNN_TYPE_DATA_TYPE), static_cast<int>(sizeof(cudnnDataType_t)));
  EXPECT_EQ(cudnnElementSize(CUDNN_TYPE_FRACTION), static_cast<int>(sizeof(cudnnFraction_t)));
  EXPECT_EQ(cudnnElementSize(CUDNN_TYPE_CHAR), 1);
  EXPECT_EQ(cudnnElementSize(999), -1);
  EXPECT_EQ(kCudnnAttrTensorIsByValue, static_cast<uint32_t>(CUDNN_ATTR_TENSOR_IS_BY_VALUE));
  EXPECT_EQ(kCudnnAttrVariantPackDataPointers, static_cast<uint32_t>(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS));
  EXPECT_EQ(kCudnnBackendVariantPack, static_cast<int32_t>(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR));
  EXPECT_EQ(kCudnnBackendTensor, static_cast<int32_t>(CUDNN_BACKEND_TENSOR_DESCRIPTOR));
}

}  // namespace
}  // namespace tally::server::library

namespace tally::server::library {
namespace {

// Random bytes as the arguments of every generated and hand-written executor, for a tenant that
// owns nothing: every call must be refused or answered, never crash tallyd, and never reach the
// library with a handle, descriptor or address that is not the tenant's (they are all refused
// first). Seeded, so a failure repeats.
TEST(LibraryExecutors, RandomArgumentsAreRefusedOrAnsweredNeverFatal) {
  session::Tenant tenant{9, "tenant-9", session::PriorityClass::kBestEffort, {}};
  std::mt19937_64 random(20261201);
  size_t malformed = 0, refused = 0, calls = 0;
  std::set<std::string> accepted;
  for (const auto* table : {&generatedExecutors(), &cublasExecutors(), &cublasLtExecutors(), &cudnnExecutors(),
                            &cudnnBackendExecutors(), &cufftExecutors()}) {
    for (const Executor& e : *table) {
      for (int round = 0; round < 20; ++round) {
        std::string bytes(random() % 200, '\0');
        for (char& b : bytes) b = static_cast<char>(random());
        LibraryCall c(tenant, *reinterpret_cast<gpu::Gpu*>(uintptr_t{0x10}), libraryOf(e.name), e.name,
                      ArgReader(bytes.data(), bytes.size()), [](uint64_t) { return static_cast<session::StreamState*>(nullptr); });
        e.run(c);
        ++calls;
        malformed += c.malformed();
        refused += c.refused();
        if (!c.refused()) accepted.insert(e.name);
      }
    }
  }
  EXPECT_GT(calls, 10000u);
  EXPECT_GT(malformed, 0u);
  // What random bytes can make whole: creations under a fresh id, and cuFFT's plan-less queries
  // (estimates, version): they name nothing of the tenant's. Anything else accepting them would
  // let garbage reach the library.
  for (const std::string& name : accepted) {
    bool namesNothing = name.find("Create") != std::string::npos || name.starts_with("cufftEstimate") ||
                        name == "cufftGetVersion" || name == "cufftGetProperty";
    EXPECT_TRUE(namesNothing) << name << " accepted random arguments";
  }
  EXPECT_GE(refused + accepted.size() * 20, calls);
  tenant.libraryObjects().takeAll();
}

}  // namespace
}  // namespace tally::server::library
