// A minimal parallel loop over std::thread for host code (the CPU reference).
// Each task index runs exactly once, on one worker; results are deterministic
// as long as tasks write disjoint outputs, whatever the number of workers.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace attn::detail {

// Workers a parallel loop may use: ATTN_NUM_THREADS when it holds a positive
// integer, else the hardware's concurrency. Read on every call, so tests can
// change it between calls.
inline int num_threads() {
  if (const char* env = std::getenv("ATTN_NUM_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n > 0) return static_cast<int>(std::min<long>(n, 1024));
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

// Calls fn(task) for task in [0, n_tasks), spread over up to num_threads()
// workers (the calling thread is one of them). Tasks are handed out one at a
// time, so uneven tasks balance. The first exception thrown by a task stops
// the hand-out and is rethrown here after every worker has finished.
template <typename F>
void parallel_for(int64_t n_tasks, F&& fn) {
  if (n_tasks <= 0) return;
  const int64_t workers = std::min<int64_t>(num_threads(), n_tasks);
  if (workers <= 1) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(t);
    return;
  }
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    while (!failed.load(std::memory_order_relaxed)) {
      const int64_t t = next.fetch_add(1, std::memory_order_relaxed);
      if (t >= n_tasks) return;
      try {
        fn(t);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        failed.store(true, std::memory_order_relaxed);
      }
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(workers - 1));
  for (int64_t w = 1; w < workers; ++w) {
    try {
      threads.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no more threads to be had: the ones running (and this one) finish the work
    }
  }
  work();
  for (std::thread& th : threads) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace attn::detail
