// Notices a peer that has gone while its session thread cannot (it is inside a driver call
// that waits for the GPU): one thread polls every watched connection for hang-up and runs the
// watch's action once. Used to release a dead tenant's host-callback waits (host_waits.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace tally::server::session {

class HangupWatch {
 public:
  HangupWatch();
  ~HangupWatch();
  HangupWatch(const HangupWatch&) = delete;
  HangupWatch& operator=(const HangupWatch&) = delete;

  // Runs `onHangup` (on the watch thread) once the peer of `fd` hangs up; returns a watch id.
  // `fd` must stay open until unwatch().
  uint64_t watch(int fd, std::function<void()> onHangup);
  // After this returns the action has run or never will.
  void unwatch(uint64_t id);

 private:
  struct Watch {
    int fd;
    std::function<void()> onHangup;
  };
  void run();
  void wake();

  int wakeFd_ = -1;  // eventfd: the watch set changed, or stop
  std::mutex mutex_;
  std::mutex runningAction_;  // held while an action runs, so unwatch() can wait for it
  std::map<uint64_t, Watch> watches_;
  uint64_t nextId_ = 1;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tally::server::session
