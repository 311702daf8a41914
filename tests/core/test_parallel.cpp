// The host parallel loop (src/core/parallel.h): every task runs exactly once,
// ATTN_NUM_THREADS sets the number of workers, a task's exception reaches the
// caller.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/parallel.h"

namespace attn::detail {
namespace {

class ScopedThreads {
 public:
  explicit ScopedThreads(const char* value) {
    if (const char* old = std::getenv("ATTN_NUM_THREADS")) old_ = old;
    if (value) setenv("ATTN_NUM_THREADS", value, 1);
    else unsetenv("ATTN_NUM_THREADS");
  }
  ~ScopedThreads() {
    if (old_) setenv("ATTN_NUM_THREADS", old_->c_str(), 1);
    else unsetenv("ATTN_NUM_THREADS");
  }

 private:
  std::optional<std::string> old_;
};

TEST(Parallel, NumThreadsFromEnvironment) {
  {
    ScopedThreads t("3");
    EXPECT_EQ(num_threads(), 3);
  }
  const int hw = std::max(1u, std::thread::hardware_concurrency());
  for (const char* bad : {"0", "-2", "abc", "4x", ""}) {
    ScopedThreads t(bad);
    EXPECT_EQ(num_threads(), hw) << "'" << bad << "' falls back to the hardware";
  }
  ScopedThreads unset(nullptr);
  EXPECT_EQ(num_threads(), hw);
}

TEST(Parallel, EveryTaskRunsExactlyOnce) {
  for (const char* threads : {"1", "2", "7", "64"}) {
    ScopedThreads t(threads);
    for (int64_t n : {0, 1, 5, 1000}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
      parallel_for(n, [&](int64_t task) { runs[task].fetch_add(1); });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(runs[i].load(), 1) << "task " << i << " threads " << threads;
    }
  }
}

TEST(Parallel, UsesSeveralWorkers) {
  ScopedThreads t("4");
  std::mutex m;
  std::set<std::thread::id> ids;
  std::atomic<int> arrived{0};
  parallel_for(4, [&](int64_t) {
    {
      std::lock_guard<std::mutex> lock(m);
      ids.insert(std::this_thread::get_id());
    }
    // Wait (bounded) until every task has started: only possible in parallel.
    arrived.fetch_add(1);
    for (int spin = 0; spin < 2000 && arrived.load() < 4; ++spin) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  EXPECT_EQ(ids.size(), 4u);
}

TEST(Parallel, ExceptionReachesTheCaller) {
  for (const char* threads : {"1", "3"}) {
    ScopedThreads t(threads);
    std::atomic<int> ran{0};
    EXPECT_THROW(parallel_for(100,
                              [&](int64_t task) {
                                ran.fetch_add(1);
                                if (task == 10) throw std::runtime_error("task 10");
                              }),
                 std::runtime_error);
    EXPECT_GE(ran.load(), 11);
  }
}

}  // namespace
}  // namespace attn::detail
