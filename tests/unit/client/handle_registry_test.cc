// HandleRegistry: a handle is valid from creation to destruction, and only as its own kind.
#include "client/runtime/handles.h"

#include <gtest/gtest.h>

namespace tally::client {
namespace {

TEST(HandleRegistry, MadeUpStaleAndWronglyTypedHandlesAreRefused) {
  auto* stream = new StreamHandle();
  EXPECT_EQ(checkedHandle<StreamHandle>(stream, HandleMagic::kStream), nullptr);  // not given out yet
  registerHandle(stream);
  EXPECT_EQ(checkedHandle<StreamHandle>(stream, HandleMagic::kStream), stream);
  EXPECT_EQ(checkedHandle<EventHandle>(stream, HandleMagic::kEvent), nullptr);
  // A made-up pointer is refused without being dereferenced (this one would fault).
  EXPECT_EQ(checkedHandle<StreamHandle>(reinterpret_cast<void*>(0x1234), HandleMagic::kStream), nullptr);
  handleRegistry().remove(stream);
  EXPECT_EQ(checkedHandle<StreamHandle>(stream, HandleMagic::kStream), nullptr);
  delete stream;
}

}  // namespace
}  // namespace tally::client
