// Writes the fuzz target's seed corpus: valid frames as the client sends them.
//   fuzz_seed_gen OUTPUT_DIR
// The files are checked in under tests/fuzz/corpus/; rerun this after a schema change.
#include "common/frame/frame.h"
#include "schema/envelope.capnp.h"

#include <capnp/message.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace {

using Bytes = std::vector<char>;
using CallFiller = std::function<void(tally::wire::Call::Builder)>;

// One frame: header, flat message, `bulkBytes` bulk bytes (a recognisable pattern).
void appendFrame(Bytes& out, capnp::MessageBuilder& message, size_t bulkBytes) {
  kj::Array<capnp::word> words = tally::frame::flatten(message);
  tally::frame::FrameHeader header = tally::frame::makeHeader(words.size() * sizeof(capnp::word), bulkBytes);
  const char* h = reinterpret_cast<const char*>(&header);
  out.insert(out.end(), h, h + sizeof(header));
  const char* m = reinterpret_cast<const char*>(words.begin());
  out.insert(out.end(), m, m + words.size() * sizeof(capnp::word));
  for (size_t i = 0; i < bulkBytes; ++i) out.push_back(static_cast<char>(i * 7));
}

void appendHello(Bytes& out) {
  capnp::MallocMessageBuilder message;
  auto hello = message.initRoot<tally::wire::ClientMessage>().initHello();
  hello.setProtocolVersion(tally::wire::PROTOCOL_VERSION);
  hello.setTenantName("fuzz-seed");
  hello.setPriority(tally::wire::PriorityClass::HIGH_PRIORITY);
  const char token[] = "seed-token";
  hello.setAuthToken(kj::arrayPtr(reinterpret_cast<const kj::byte*>(token), sizeof(token) - 1));
  hello.setClientHost("fuzzhost");
  hello.setClientPid(4242);
  hello.setCudaRuntimeVersion(13000);
  appendFrame(out, message, 0);
}

void appendCalls(Bytes& out, const std::vector<CallFiller>& fillers, size_t bulkBytes) {
  capnp::MallocMessageBuilder message;
  auto calls = message.initRoot<tally::wire::ClientMessage>().initCalls(static_cast<unsigned>(fillers.size()));
  for (unsigned i = 0; i < fillers.size(); ++i) fillers[i](calls[i]);
  appendFrame(out, message, bulkBytes);
}

void launch(tally::wire::Call::Builder call) {
  call.setId(0);
  auto l = call.initLaunchKernel();
  l.setFunction(0x10001);
  l.initGrid().setX(128);
  l.getGrid().setY(1);
  l.getGrid().setZ(1);
  l.initBlock().setX(256);
  l.getBlock().setY(1);
  l.getBlock().setZ(1);
  l.setSharedMem(1024);
  l.setStream(0x10000);
  const kj::byte params[24] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  l.setParams(kj::arrayPtr(params, sizeof(params)));
  auto attributes = l.initAttributes(1);
  attributes[0].setId(4);
  attributes[0].initValue().setX(2);
}

void memcpyToDevice(tally::wire::Call::Builder call, uint64_t width, uint64_t height) {
  call.setId(7);
  auto m = call.initMemcpy();
  m.setKind(tally::wire::CopyKind::HOST_TO_DEVICE);
  m.setStream(1);
  m.setDst(0x7f0000000000);
  m.setWidth(width);
  m.setHeight(height);
  m.setDstPitch(height > 1 ? 512 : 0);
}

void moduleLoad(tally::wire::Call::Builder call, uint64_t imageSize) {
  call.setId(3);
  auto m = call.initModuleLoad();
  m.setDevice(0);
  m.setModule(0x20001);
  const kj::byte hash[32] = {0xde, 0xad, 0xbe, 0xef};  // SHA-256 sized (schema/module.capnp)
  m.setHash(kj::arrayPtr(hash, sizeof(hash)));
  m.setKind(tally::wire::ImageKind::FATBIN);
  m.setImageSize(imageSize);
  m.setHasImage(true);
}

bool writeFile(const std::string& dir, const std::string& name, const Bytes& bytes) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  Bytes hello, launchFrame, memcpyFrame, moduleFrame, session;
  appendHello(hello);
  appendCalls(launchFrame, {launch}, 0);
  appendCalls(memcpyFrame, {[](auto c) { memcpyToDevice(c, 64, 1); }}, 64);
  appendCalls(moduleFrame, {[](auto c) { moduleLoad(c, 96); }}, 96);
  // A short session: hello, then a batch of several call kinds, a 2D copy with bulk, a sync.
  session = hello;
  appendCalls(session,
              {[](auto c) {
                 c.setId(1);
                 auto a = c.initMemAlloc();
                 a.setSize(1 << 20);
               },
               [](auto c) {
                 auto s = c.initStreamCreate();
                 s.setStream(0x10000);
                 s.setNonBlocking(true);
                 s.setPriority(-1);
               },
               [](auto c) {
                 c.setId(2);
                 auto g = c.initModuleGetFunction();
                 g.setModule(0x20001);
                 g.setFunction(0x10001);
                 g.setName("_Z6vecAddPKfS0_Pfi");
               },
               launch,
               [](auto c) {
                 auto e = c.initEventRecord();
                 e.setEvent(5);
                 e.setStream(0x10000);
               }},
              0);
  appendCalls(session, {[](auto c) { memcpyToDevice(c, 16, 4); }}, 64);
  appendCalls(session, {[](auto c) {
                c.setId(9);
                c.initStreamSynchronize().setStream(0x10000);
              }},
              0);
  bool ok = writeFile(dir, "hello.bin", hello) && writeFile(dir, "launch.bin", launchFrame) &&
            writeFile(dir, "memcpy_bulk.bin", memcpyFrame) && writeFile(dir, "module_load.bin", moduleFrame) &&
            writeFile(dir, "session.bin", session);
  if (!ok) std::fprintf(stderr, "cannot write the seeds to %s\n", dir.c_str());
  return ok ? 0 : 1;
}
