// compilePtx (nvJitLink, no GPU) and the VariantCompiler's worker thread and cache use.
#include "server/transform/cache/compile_ptx.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "server/transform/cache/variant_compiler.h"
#include "server/transform/parser.h"
#include "server/transform/printer.h"
#include "server/transform/slice.h"

namespace tally::server::transform {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSmallPtx = R"(
.version 9.0
.target sm_90
.address_size 64

.visible .entry add_one(.param .u64 p, .param .u32 n)
{
	.reg .pred %p<2>;
	.reg .b32 %r<6>;
	.reg .b64 %rd<5>;
	ld.param.u64 %rd1, [p];
	ld.param.u32 %r2, [n];
	mov.u32 %r3, %ctaid.x;
	mov.u32 %r4, %ntid.x;
	mov.u32 %r5, %tid.x;
	mad.lo.s32 %r1, %r3, %r4, %r5;
	setp.ge.u32 %p1, %r1, %r2;
	@%p1 bra $L__done;
	cvta.to.global.u64 %rd2, %rd1;
	mul.wide.u32 %rd3, %r1, 4;
	add.s64 %rd4, %rd2, %rd3;
	ld.global.u32 %r3, [%rd4];
	add.s32 %r3, %r3, 1;
	st.global.u32 [%rd4], %r3;
$L__done:
	ret;
}
)";

bool isElf(const std::string& s) { return s.size() > 4 && s.compare(0, 4, "\x7f" "ELF") == 0; }

std::string readBytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

fs::path scratch(const std::string& name) {
  static int counter = 0;
  auto dir = fs::temp_directory_path() /
             ("tally_vcompile_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + "_" + name);
  fs::remove_all(dir);
  return dir;
}

TEST(CompilePtx, SmallKernelGivesElfCubin) {
  std::string log;
  auto cubin = compilePtx(kSmallPtx, "sm_90", log);
  ASSERT_TRUE(cubin) << log;
  EXPECT_TRUE(isElf(*cubin));
  EXPECT_NE(cubin->find("add_one"), std::string::npos);  // the symbol table names the kernel
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The toolkit's ptxas compiles the module as a whole program; without it (TALLY_PTXAS empty, or
// not runnable) nvJitLink's relocatable compile still gives a loadable cubin, of other code.
TEST(CompilePtx, PtxasWhenThereIsOneElseNvJitLink) {
  if (access("/usr/local/cuda/bin/ptxas", X_OK) != 0) GTEST_SKIP() << "no /usr/local/cuda/bin/ptxas on this host";
  std::string log;
  auto whole = compilePtx(kSmallPtx, "sm_90", log);
  ASSERT_TRUE(whole) << log;
  std::optional<std::string> linked, fallback;
  {
    ScopedEnv none("TALLY_PTXAS", "");
    linked = compilePtx(kSmallPtx, "sm_90", log);
    ASSERT_TRUE(linked) << log;
  }
  {
    ScopedEnv missing("TALLY_PTXAS", "/nonexistent/ptxas");
    fallback = compilePtx(kSmallPtx, "sm_90", log);
    ASSERT_TRUE(fallback) << log;
    EXPECT_NE(log.find("cannot run"), std::string::npos) << log;
  }
  EXPECT_TRUE(isElf(*whole) && isElf(*linked));
  EXPECT_NE(*whole, *linked);
  EXPECT_EQ(*fallback, *linked);
}

TEST(CompilePtx, CorpusSlicedVariantGivesElfCubin) {
  fs::path path = fs::path(TALLY_TRANSFORM_CORPUS_DIR) / "grids_sm90.ptx";
  std::string ptx = readBytes(path);
  ASSERT_FALSE(ptx.empty()) << path;
  auto parsed = parseModule(ptx);
  ASSERT_TRUE(parsed.ok) << parsed.error;
  auto sliced = addSlicedKernels(parsed.module);
  ASSERT_TRUE(sliced.ok) << sliced.error;
  ASSERT_GT(sliced.added, 0);
  std::string text = printModule(sliced.module);
  std::string log;
  auto cubin = compilePtx(text, "sm_90", log);
  ASSERT_TRUE(cubin) << log;
  EXPECT_TRUE(isElf(*cubin));
  EXPECT_NE(cubin->find("__tally_sliced"), std::string::npos);
}

TEST(CompilePtx, BadPtxGivesLog) {
  std::string log;
  std::string bad = std::string(kSmallPtx);
  bad.replace(bad.find("add.s32"), 7, "frob.s32");
  EXPECT_FALSE(compilePtx(bad, "sm_90", log));
  EXPECT_FALSE(log.empty());

  log.clear();
  EXPECT_FALSE(compilePtx("this is not PTX", "sm_90", log));
  EXPECT_FALSE(log.empty());

  log.clear();
  EXPECT_FALSE(compilePtx("", "sm_90", log));
  EXPECT_FALSE(log.empty());

  log.clear();
  EXPECT_FALSE(compilePtx(kSmallPtx, "sm_nonsense", log));
  EXPECT_FALSE(log.empty());
}

VariantKey keyFor(const std::string& ptx, const std::string& variant = "sliced") {
  VariantKey k;
  k.ptxHash = hash::contentHash(ptx.data(), ptx.size());
  k.variant = variant;
  k.transformerVersion = 1;
  k.driverVersion = 13000;
  k.arch = "sm_90";
  return k;
}

// Runs request() and waits for its answer.
std::optional<std::string> requestAndWait(VariantCompiler& compiler, const VariantKey& key, const std::string& ptx) {
  std::promise<std::optional<std::string>> promise;
  auto future = promise.get_future();
  std::thread::id worker;
  bool queued = compiler.request(key, ptx, [&](std::optional<std::string> cubin) {
    worker = std::this_thread::get_id();
    promise.set_value(std::move(cubin));
  });
  EXPECT_TRUE(queued);
  if (!queued) return std::nullopt;
  EXPECT_EQ(future.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  auto result = future.get();
  EXPECT_NE(worker, std::this_thread::get_id());
  return result;
}

TEST(VariantCompiler, SecondRequestIsCacheHit) {
  fs::path dir = scratch("hit");
  VariantCache cache(dir);
  std::atomic<int> compiles{0};
  VariantCompiler compiler(cache, 8, [&](const VariantKey& key, std::string_view ptx, std::string& log) {
    ++compiles;
    return compilePtx(ptx, key.arch, log);
  });
  const std::string ptx = kSmallPtx;
  VariantKey key = keyFor(ptx);
  auto first = requestAndWait(compiler, key, ptx);
  ASSERT_TRUE(first) << compiler.lastError();
  EXPECT_TRUE(isElf(*first));
  EXPECT_EQ(compiles, 1);
  auto second = requestAndWait(compiler, key, ptx);
  ASSERT_TRUE(second);
  EXPECT_EQ(*second, *first);
  EXPECT_EQ(compiles, 1);
  auto stats = compiler.stats();
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.compiles, 1u);

  // A new compiler over the same directory (tallyd restarted) hits too.
  VariantCompiler again(cache, 8, [&](const VariantKey& key, std::string_view ptx, std::string& log) {
    ++compiles;
    return compilePtx(ptx, key.arch, log);
  });
  EXPECT_TRUE(requestAndWait(again, key, ptx));
  EXPECT_EQ(compiles, 1);
  fs::remove_all(dir);
}

TEST(VariantCompiler, FailureIsNulloptAndNotCached) {
  fs::path dir = scratch("fail");
  VariantCache cache(dir);
  VariantCompiler compiler(cache);
  const std::string bad = "not ptx at all";
  VariantKey key = keyFor(bad);
  EXPECT_FALSE(requestAndWait(compiler, key, bad));
  EXPECT_FALSE(compiler.lastError().empty());
  EXPECT_FALSE(cache.find(key));
  EXPECT_EQ(compiler.stats().compileFailures, 1u);
  fs::remove_all(dir);
}

TEST(VariantCompiler, BoundedQueueAndCleanShutdown) {
  fs::path dir = scratch("bounded");
  VariantCache cache(dir);
  std::mutex m;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> started{0};
  std::atomic<int> answered{0}, gotCubin{0};
  {
    // A compile that blocks until released, so the queue fills behind it.
    VariantCompiler compiler(cache, 2, [&](const VariantKey&, std::string_view, std::string&) {
      ++started;
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return release; });
      return std::optional<std::string>("\x7f" "ELFfake");
    });
    auto done = [&](std::optional<std::string> c) {
      ++answered;
      if (c) ++gotCubin;
    };
    ASSERT_TRUE(compiler.request(keyFor("a"), "a", done));
    while (started == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_TRUE(compiler.request(keyFor("b"), "b", done));
    EXPECT_TRUE(compiler.request(keyFor("c"), "c", done));
    EXPECT_FALSE(compiler.request(keyFor("d"), "d", done));  // queue full
    EXPECT_EQ(compiler.queued(), 2u);
    EXPECT_EQ(compiler.stats().rejected, 1u);
    {
      std::lock_guard lock(m);
      release = true;
    }
    cv.notify_all();
    // Destructor: the running compile finishes; whatever is still queued is answered nullopt.
  }
  EXPECT_EQ(answered, 3);
  EXPECT_GE(gotCubin, 1);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tally::server::transform
