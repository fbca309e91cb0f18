// VariantKey file names, VariantCache round trips, damaged entries and concurrent stores.
#include "server/transform/cache/variant_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace tally::server::transform {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  static int counter = 0;
  auto dir = fs::temp_directory_path() /
             ("tally_vcache_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + "_" + name);
  fs::remove_all(dir);
  return dir;
}

std::string readBytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void writeBytes(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary | std::ios::trunc) << s; }

VariantKey sampleKey() {
  VariantKey k;
  std::string ptx = ".version 9.0\n.target sm_90\n";
  k.ptxHash = hash::contentHash(ptx.data(), ptx.size());
  k.variant = "sliced";
  k.transformerVersion = 1;
  k.driverVersion = 13000;
  k.arch = "sm_90";
  return k;
}

std::string sampleCubin(size_t n = 4096) {
  std::string s = "\x7f" "ELF";
  for (size_t i = s.size(); i < n; ++i) s.push_back(static_cast<char>((i * 131 + 7) & 0xff));
  return s;
}

TEST(VariantKey, FileNameStableAndHex) {
  VariantKey k = sampleKey();
  std::string name = k.fileName();
  EXPECT_EQ(name, sampleKey().fileName());
  ASSERT_EQ(name.size(), 64u + 4u);
  EXPECT_EQ(name.substr(64), ".tvc");
  for (char c : name.substr(0, 64)) EXPECT_TRUE(std::isxdigit(static_cast<unsigned char>(c))) << name;
  // Pinned: the name must not change between builds or tallyd versions. SHA-256 of encode(),
  // computed independently with Python's hashlib from the documented encoding.
  EXPECT_EQ(name, "3534e91fa5ceba33a9d98ab760eff7ca4e949f55525d8773b4aad9365189f8cf.tvc");
}

TEST(VariantKey, FileNameDistinctPerField) {
  std::vector<VariantKey> keys(6, sampleKey());
  keys[1].ptxHash[15] ^= 1;
  keys[2].variant = "ptb";
  keys[3].transformerVersion = 2;
  keys[4].driverVersion = 13010;
  keys[5].arch = "sm_80";
  std::set<std::string> names;
  for (const auto& k : keys) names.insert(k.fileName());
  EXPECT_EQ(names.size(), keys.size());
  // Length prefixes: moving a character from one string field to the next is another key.
  VariantKey a = sampleKey(), b = sampleKey();
  a.variant = "ab";
  a.arch = "c";
  b.variant = "a";
  b.arch = "bc";
  EXPECT_NE(a.fileName(), b.fileName());
}

TEST(VariantCache, MissingDirectoryIsMissAndIsCreated0700) {
  fs::path dir = scratch("create") / "nested" / "cache";
  VariantCache cache(dir);
  EXPECT_FALSE(cache.find(sampleKey()));
  EXPECT_FALSE(fs::exists(dir));
  std::string error;
  ASSERT_TRUE(cache.store(sampleKey(), sampleCubin(), error)) << error;
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  fs::remove_all(dir.parent_path().parent_path());
}

TEST(VariantCache, RoundTrip) {
  fs::path dir = scratch("roundtrip");
  VariantCache cache(dir);
  std::string error;
  VariantKey k = sampleKey();
  std::string cubin = sampleCubin();
  ASSERT_TRUE(cache.store(k, cubin, error)) << error;
  auto got = cache.find(k);
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, cubin);
  EXPECT_TRUE(fs::exists(dir / k.fileName()));
  // Another key is a miss; overwriting replaces.
  VariantKey other = k;
  other.variant = "ptb";
  EXPECT_FALSE(cache.find(other));
  ASSERT_TRUE(cache.store(k, "\x7f" "ELFnew", error)) << error;
  EXPECT_EQ(cache.find(k).value_or(""), "\x7f" "ELFnew");
  // Empty payload and payload with NULs survive.
  std::string withNul("a\0b\0c", 5);
  ASSERT_TRUE(cache.store(other, withNul, error)) << error;
  EXPECT_EQ(cache.find(other).value_or("x"), withNul);
  // Only the two entries, no temporary files left.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 2);
  fs::remove_all(dir);
}

TEST(VariantCache, DamagedEntriesAreMisses) {
  fs::path dir = scratch("damaged");
  VariantCache cache(dir);
  std::string error;
  VariantKey k = sampleKey();
  ASSERT_TRUE(cache.store(k, sampleCubin(), error)) << error;
  const fs::path path = cache.pathFor(k);
  const std::string good = readBytes(path);
  ASSERT_GT(good.size(), 4096u);

  // Every truncation (header and payload), and an extra byte.
  for (size_t len = 0; len < good.size(); len += (len < 128 ? 1 : 97)) {
    writeBytes(path, good.substr(0, len));
    EXPECT_FALSE(cache.find(k)) << "truncated to " << len;
  }
  writeBytes(path, good + "x");
  EXPECT_FALSE(cache.find(k));
  // A flipped bit anywhere: magic, key echo, length, checksum, payload.
  for (size_t pos = 0; pos < good.size(); pos += (pos < 128 ? 1 : 211)) {
    std::string bad = good;
    bad[pos] ^= 0x10;
    writeBytes(path, bad);
    EXPECT_FALSE(cache.find(k)) << "flipped byte " << pos;
  }
  // Another key's valid entry under this key's name.
  VariantKey other = k;
  other.arch = "sm_80";
  ASSERT_TRUE(cache.store(other, sampleCubin(), error)) << error;
  fs::copy_file(cache.pathFor(other), path, fs::copy_options::overwrite_existing);
  EXPECT_FALSE(cache.find(k));
  // A directory where the file should be.
  fs::remove(path);
  fs::create_directory(path);
  EXPECT_FALSE(cache.find(k));
  fs::remove(path);
  // Restoring works again.
  ASSERT_TRUE(cache.store(k, sampleCubin(), error)) << error;
  EXPECT_TRUE(cache.find(k));
  fs::remove_all(dir);
}

TEST(VariantCache, ErrorsNameThePath) {
  fs::path base = scratch("errors");
  fs::create_directories(base);
  fs::path file = base / "not_a_dir";
  writeBytes(file, "x");
  VariantCache cache(file);
  std::string error;
  EXPECT_FALSE(cache.store(sampleKey(), sampleCubin(), error));
  EXPECT_NE(error.find(file.string()), std::string::npos) << error;
  EXPECT_FALSE(cache.find(sampleKey()));

  VariantCache below(file / "sub");
  error.clear();
  EXPECT_FALSE(below.store(sampleKey(), sampleCubin(), error));
  EXPECT_NE(error.find(file.string()), std::string::npos) << error;
  fs::remove_all(base);
}

TEST(VariantCache, ConcurrentStoresOfOneKeyLeaveOneValidFile) {
  fs::path dir = scratch("concurrent");
  VariantCache cache(dir);
  VariantKey k = sampleKey();
  // Each thread stores its own (valid) cubin many times while readers look.
  std::vector<std::string> cubins;
  for (int t = 0; t < 4; ++t) cubins.push_back(sampleCubin(200000 + t * 1000));
  std::atomic<int> failures{0}, badReads{0};
  std::atomic<bool> writing{true};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        std::string error;
        if (!cache.store(k, cubins[t], error)) ++failures;
      }
    });
  }
  std::thread reader([&] {
    while (writing) {
      if (auto got = cache.find(k)) {
        bool known = false;
        for (const auto& c : cubins) known |= (*got == c);
        if (!known) ++badReads;
      }
    }
  });
  for (auto& th : threads) th.join();
  writing = false;
  reader.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(badReads, 0);
  std::vector<fs::path> files(fs::directory_iterator(dir), fs::directory_iterator{});
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].filename(), k.fileName());
  auto got = cache.find(k);
  ASSERT_TRUE(got);
  bool known = false;
  for (const auto& c : cubins) known |= (*got == c);
  EXPECT_TRUE(known);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tally::server::transform
