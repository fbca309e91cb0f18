#include "client/entry/per_thread_stream.h"

namespace tally::client {
namespace {

thread_local bool tNullStreamIsPerThread = false;

}  // namespace

bool nullStreamIsPerThread() { return tNullStreamIsPerThread; }

NullStreamIsPerThread::NullStreamIsPerThread() : previous_(tNullStreamIsPerThread) { tNullStreamIsPerThread = true; }

NullStreamIsPerThread::~NullStreamIsPerThread() { tNullStreamIsPerThread = previous_; }

}  // namespace tally::client
