// IpcRegistry: handles are random, name one live grant, and die with it.
#include "server/session/ipc_registry.h"

#include <gtest/gtest.h>

namespace tally::server::session {
namespace {

TEST(IpcRegistryTest, AHandleNamesItsGrantWhileItLives) {
  IpcRegistry registry;
  auto grant = std::make_shared<IpcMemoryGrant>();
  grant->owner = 1;
  grant->base = 0x1000;
  registry.publish(grant);
  EXPECT_EQ(registry.memory(grant->handle), grant);
  grant->live.store(false);  // the owner freed it
  EXPECT_EQ(registry.memory(grant->handle), nullptr);
  EXPECT_EQ(registry.size(), 0u);
}

TEST(IpcRegistryTest, HandlesAreRandomAndExact) {
  IpcRegistry registry;
  auto a = std::make_shared<IpcMemoryGrant>();
  auto b = std::make_shared<IpcMemoryGrant>();
  registry.publish(a);
  registry.publish(b);
  EXPECT_NE(a->handle, b->handle);
  EXPECT_NE(a->handle, IpcHandleBytes{});
  IpcHandleBytes guessed = a->handle;
  guessed[63] ^= 1;
  EXPECT_EQ(registry.memory(guessed), nullptr);
  EXPECT_EQ(registry.memory(std::span<const uint8_t>(a->handle.data(), 32)), nullptr);  // truncated
  EXPECT_EQ(registry.event(a->handle), nullptr);  // a memory handle is no event handle
}

TEST(IpcRegistryTest, AGrantGoneIsForgotten) {
  IpcRegistry registry;
  IpcHandleBytes handle;
  {
    auto grant = std::make_shared<IpcEventGrant>();
    registry.publish(grant);
    handle = grant->handle;
    EXPECT_EQ(registry.event(handle), grant);
  }
  EXPECT_EQ(registry.event(handle), nullptr);
  EXPECT_EQ(registry.size(), 0u);
}

}  // namespace
}  // namespace tally::server::session
