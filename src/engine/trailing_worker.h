#pragma once
// One persistent thread that runs one job at a time: Model::forward_pair's second forward
// (the draft's, which trails the first layer by layer). Posting and waiting spin for a
// while before they sleep: a pair takes milliseconds and comes right after the previous
// one, and a wake-up through the kernel would add tens of microseconds to every pair.
#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace qpu::engine {

class TrailingWorker {
 public:
  TrailingWorker();
  ~TrailingWorker();  // joins (after the last job's wait())
  TrailingWorker(const TrailingWorker&) = delete;
  TrailingWorker& operator=(const TrailingWorker&) = delete;

  // Runs `job` on the worker thread. One job at a time: wait() before the next post.
  void post(std::function<void()> job);
  // Until the posted job has returned; rethrows what it threw.
  void wait();

 private:
  enum Phase : int { kIdle, kPosted, kDone, kQuit };
  void loop();
  // Spins (with a CPU pause) until phase_ is one of the two, for up to about 200 us;
  // returns the phase seen, or -1 if neither came.
  int spin_for(int a, int b) const;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::atomic<int> phase_{kIdle};
  std::function<void()> job_;
  std::exception_ptr error_;
  std::thread thread_;  // last: started once the rest is ready
};

// A CPU hint for spin loops (x86 PAUSE; a yield elsewhere).
void spin_pause();

}  // namespace qpu::engine
