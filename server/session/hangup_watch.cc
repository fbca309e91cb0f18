#include "server/session/hangup_watch.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <vector>

namespace tally::server::session {

HangupWatch::HangupWatch() : wakeFd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  thread_ = std::thread([this] { run(); });
}

HangupWatch::~HangupWatch() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake();
  thread_.join();
  ::close(wakeFd_);
}

void HangupWatch::wake() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wakeFd_, &one, sizeof one);
}

uint64_t HangupWatch::watch(int fd, std::function<void()> onHangup) {
  uint64_t id;
  {
    std::lock_guard lock(mutex_);
    id = nextId_++;
    watches_.emplace(id, Watch{fd, std::move(onHangup)});
  }
  wake();
  return id;
}

void HangupWatch::unwatch(uint64_t id) {
  {
    std::lock_guard lock(mutex_);
    watches_.erase(id);
  }
  wake();
  std::lock_guard waitForAction(runningAction_);  // an action taken out before the erase ends first
}

void HangupWatch::run() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  for (;;) {
    fds.assign(1, pollfd{wakeFd_, POLLIN, 0});
    ids.assign(1, 0);
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      for (auto& [id, w] : watches_) {
        fds.push_back(pollfd{w.fd, POLLRDHUP, 0});
        ids.push_back(id);
      }
    }
    if (::poll(fds.data(), fds.size(), -1) < 0) continue;  // EINTR
    if (fds[0].revents != 0) {
      uint64_t drained;
      [[maybe_unused]] ssize_t n = ::read(wakeFd_, &drained, sizeof drained);
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if ((fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) == 0) continue;
      std::unique_lock action(runningAction_);
      std::function<void()> onHangup;
      {
        std::lock_guard lock(mutex_);
        auto it = watches_.find(ids[i]);
        if (it == watches_.end()) continue;
        onHangup = std::move(it->second.onHangup);
        watches_.erase(it);
      }
      onHangup();
    }
  }
}

}  // namespace tally::server::session
