#include "engine/trailing_worker.h"

#include <chrono>
#include <utility>

namespace qpu::engine {

void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

TrailingWorker::TrailingWorker() : thread_([this] { loop(); }) {}

// Every post is followed by a wait (Model::forward_pair waits even when its own forward
// throws), so no job is pending here.
TrailingWorker::~TrailingWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    phase_.store(kQuit, std::memory_order_release);
  }
  changed_.notify_all();
  thread_.join();
}

int TrailingWorker::spin_for(int a, int b) const {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
  for (int i = 0;; ++i) {
    const int p = phase_.load(std::memory_order_acquire);
    if (p == a || p == b) return p;
    if (i % 64 == 63 && std::chrono::steady_clock::now() > until) return -1;
    spin_pause();
  }
}

void TrailingWorker::post(std::function<void()> job) {
  job_ = std::move(job);
  error_ = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    phase_.store(kPosted, std::memory_order_release);
  }
  changed_.notify_all();
}

void TrailingWorker::wait() {
  if (spin_for(kDone, kDone) < 0) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return phase_.load(std::memory_order_acquire) == kDone; });
  }
  phase_.store(kIdle, std::memory_order_release);
  job_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void TrailingWorker::loop() {
  for (;;) {
    int p = spin_for(kPosted, kQuit);
    if (p < 0) {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] {
        p = phase_.load(std::memory_order_acquire);
        return p == kPosted || p == kQuit;
      });
    }
    if (p == kQuit) return;
    try {
      job_();
    } catch (...) {
      error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      phase_.store(kDone, std::memory_order_release);
    }
    changed_.notify_all();
  }
}

}  // namespace qpu::engine
