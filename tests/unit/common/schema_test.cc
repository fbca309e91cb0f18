// The wire contract round-trips through flat arrays the way the framing sends it.
#include "schema/envelope.capnp.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

namespace tally::wire {
namespace {

template <typename Fill, typename Check>
void roundTrip(Fill fill, Check check) {
  capnp::MallocMessageBuilder builder;
  fill(builder);
  auto words = capnp::messageToFlatArray(builder);
  capnp::FlatArrayMessageReader reader(words);
  check(reader);
}

TEST(Schema, HelloAndWelcomeRoundTrip) {
  roundTrip([](auto& b) {
    auto hello = b.template initRoot<ClientMessage>().initHello();
    hello.setProtocolVersion(PROTOCOL_VERSION);
    hello.setTenantName("inference");
    hello.setPriority(PriorityClass::HIGH_PRIORITY);
    hello.setClientPid(1234);
  }, [](auto& r) {
    auto hello = r.template getRoot<ClientMessage>().getHello();
    EXPECT_EQ(hello.getProtocolVersion(), PROTOCOL_VERSION);
    EXPECT_EQ(std::string(hello.getTenantName().cStr()), "inference");
    EXPECT_EQ(hello.getPriority(), PriorityClass::HIGH_PRIORITY);
    EXPECT_EQ(hello.getClientPid(), 1234u);
  });
  roundTrip([](auto& b) {
    auto w = b.template initRoot<ServerMessage>().initWelcome();
    w.setAccepted(true);
    auto devices = w.initDevices(1);
    devices[0].setName("NVIDIA H200");
    devices[0].setMajor(9);
    devices[0].initAttributes(3).set(2, 132);
  }, [](auto& r) {
    auto w = r.template getRoot<ServerMessage>().getWelcome();
    EXPECT_TRUE(w.getAccepted());
    ASSERT_EQ(w.getDevices().size(), 1u);
    EXPECT_EQ(w.getDevices()[0].getMajor(), 9);
    EXPECT_EQ(w.getDevices()[0].getAttributes()[2], 132);
  });
}

TEST(Schema, LaunchCarriesParamsAndAttributes) {
  std::vector<uint8_t> params(300);
  for (size_t i = 0; i < params.size(); ++i) params[i] = static_cast<uint8_t>(i);
  roundTrip([&](auto& b) {
    auto call = b.template initRoot<ClientMessage>().initCalls(1)[0];
    auto l = call.initLaunchKernel();
    l.setFunction(77);
    l.initGrid().setX(1024);
    l.setParams(kj::arrayPtr(params.data(), params.size()));
    auto a = l.initAttributes(1);
    a[0].setId(8);
    a[0].initValue().setX(3);
  }, [&](auto& r) {
    auto l = r.template getRoot<ClientMessage>().getCalls()[0].getLaunchKernel();
    EXPECT_EQ(l.getFunction(), 77u);
    EXPECT_EQ(l.getGrid().getX(), 1024u);
    ASSERT_EQ(l.getParams().size(), params.size());
    EXPECT_TRUE(std::equal(params.begin(), params.end(), l.getParams().begin()));
    EXPECT_EQ(l.getAttributes()[0].getValue().getX(), 3u);
  });
}

TEST(Schema, ReplyUnionKeepsItsArm) {
  roundTrip([](auto& b) {
    auto reply = b.template initRoot<ServerMessage>().initReply();
    reply.setId(9);
    reply.setStatus(1);
    auto f = reply.initFunction();
    auto p = f.initParams(2);
    p[1].setOffset(8);
    p[1].setSize(1024);
  }, [](auto& r) {
    auto reply = r.template getRoot<ServerMessage>().getReply();
    EXPECT_EQ(reply.getStatus(), 1);
    ASSERT_TRUE(reply.isFunction());
    EXPECT_EQ(reply.getFunction().getParams()[1].getSize(), 1024u);
  });
}

}  // namespace
}  // namespace tally::wire
