#include "server/transform/cache/variant_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace tally::server::transform {
namespace {

constexpr char kMagic[8] = {'T', 'A', 'L', 'L', 'Y', 'V', 'C', '2'};  // 2: SHA-256 sums

void putU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void putU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t getLE(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
void putString(std::string& out, std::string_view s) {
  putU32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

std::string errnoText(int err) { return std::strerror(err); }

// Reads the whole file into `out`; false if it cannot be opened/read or exceeds `limit`.
bool readFile(const std::filesystem::path& path, uint64_t limit, std::string& out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || uint64_t(st.st_size) > limit) {
    ::close(fd);
    return false;
  }
  out.clear();
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > limit) {
      ::close(fd);
      return false;
    }
  }
  ::close(fd);
  return true;
}

bool writeAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::string VariantKey::encode() const {
  std::string out;
  out.append(reinterpret_cast<const char*>(ptxHash.data()), ptxHash.size());
  putString(out, variant);
  putU32(out, transformerVersion);
  putU32(out, static_cast<uint32_t>(driverVersion));
  putString(out, arch);
  return out;
}

std::string VariantKey::fileName() const {
  std::string bytes = encode();
  return hash::toHex(hash::contentHash(bytes.data(), bytes.size())) + ".tvc";
}

VariantCache::VariantCache(std::filesystem::path dir) : dir_(std::move(dir)) {}

bool VariantCache::ensureDirectory(std::string& error) const {
  if (dir_.empty()) {
    error = "variant cache: empty directory path";
    return false;
  }
  // Create every missing component with mode 0700 (create_directories would use 0777 & ~umask).
  std::filesystem::path partial;
  for (const auto& part : dir_) {
    partial /= part;
    if (part.empty() || part == "/" ) continue;
    if (::mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
      error = "variant cache: cannot create directory " + partial.string() + ": " + errnoText(errno);
      return false;
    }
  }
  struct stat st {};
  if (::stat(dir_.c_str(), &st) != 0) {
    error = "variant cache: cannot stat " + dir_.string() + ": " + errnoText(errno);
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    error = "variant cache: " + dir_.string() + " exists and is not a directory";
    return false;
  }
  return true;
}

std::optional<std::string> VariantCache::find(const VariantKey& key) const {
  try {
    std::string file;
    const std::string keyBytes = key.encode();
    const uint64_t headerSize = sizeof kMagic + 4 + keyBytes.size() + 8 + sizeof(hash::ContentHash);
    if (!readFile(pathFor(key), headerSize + kMaxPayload, file)) return std::nullopt;
    if (file.size() < headerSize) return std::nullopt;
    const char* p = file.data();
    if (std::memcmp(p, kMagic, sizeof kMagic) != 0) return std::nullopt;
    p += sizeof kMagic;
    if (getLE(p, 4) != keyBytes.size()) return std::nullopt;
    p += 4;
    if (std::memcmp(p, keyBytes.data(), keyBytes.size()) != 0) return std::nullopt;
    p += keyBytes.size();
    const uint64_t payloadSize = getLE(p, 8);
    p += 8;
    if (payloadSize != file.size() - headerSize) return std::nullopt;  // truncated or trailing bytes
    hash::ContentHash stored;
    std::memcpy(stored.data(), p, stored.size());
    p += stored.size();
    if (hash::contentHash(p, payloadSize) != stored) return std::nullopt;
    return file.substr(headerSize);
  } catch (...) {  // allocation failure: a miss, never an exception into tallyd
    return std::nullopt;
  }
}

bool VariantCache::store(const VariantKey& key, std::string_view cubin, std::string& error) const {
  try {
    if (cubin.size() > kMaxPayload) {
      error = "variant cache: cubin of " + std::to_string(cubin.size()) + " bytes is too large for " +
              pathFor(key).string();
      return false;
    }
    if (!ensureDirectory(error)) return false;
    const std::string keyBytes = key.encode();
    std::string header(kMagic, sizeof kMagic);
    putU32(header, static_cast<uint32_t>(keyBytes.size()));
    header += keyBytes;
    putU64(header, cubin.size());
    hash::ContentHash sum = hash::contentHash(cubin.data(), cubin.size());
    header.append(reinterpret_cast<const char*>(sum.data()), sum.size());

    const std::filesystem::path target = pathFor(key);
    // mkstemp: a unique name in the same directory (so rename is atomic), created 0600.
    std::string tmpl = (dir_ / ("." + key.fileName() + ".tmp.XXXXXX")).string();
    std::vector<char> tmpName(tmpl.begin(), tmpl.end());
    tmpName.push_back('\0');
    int fd = ::mkstemp(tmpName.data());
    if (fd < 0) {
      error = "variant cache: cannot create a temporary file in " + dir_.string() + ": " + errnoText(errno);
      return false;
    }
    const std::string tmpPath(tmpName.data());
    auto fail = [&](const std::string& what) {
      int err = errno;
      ::close(fd);
      ::unlink(tmpPath.c_str());
      error = "variant cache: " + what + " " + tmpPath + " (for " + target.string() + "): " + errnoText(err);
      return false;
    };
    if (!writeAll(fd, header.data(), header.size()) || !writeAll(fd, cubin.data(), cubin.size()))
      return fail("cannot write");
    if (::fsync(fd) != 0) return fail("cannot fsync");
    if (::close(fd) != 0) {
      int err = errno;
      ::unlink(tmpPath.c_str());
      error = "variant cache: cannot close " + tmpPath + ": " + errnoText(err);
      return false;
    }
    if (::rename(tmpPath.c_str(), target.c_str()) != 0) {
      int err = errno;
      ::unlink(tmpPath.c_str());
      error = "variant cache: cannot rename " + tmpPath + " to " + target.string() + ": " + errnoText(err);
      return false;
    }
    return true;
  } catch (const std::exception& e) {
    error = "variant cache: storing " + pathFor(key).string() + ": " + e.what();
    return false;
  }
}

}  // namespace tally::server::transform
