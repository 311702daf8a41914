// Progress on stderr for work that takes seconds or more (bench points, the
// CPU reference's long passes). Off when stderr is not a terminal, or with
// --quiet / --no-progress; costs nothing when off. GPU paths do not use it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace attn::cli {

// True when stderr is a terminal and the user did not pass --quiet.
bool progress_wanted(bool quiet);

// "1.2 s", "3 min 05 s".
std::string format_seconds(double s);

// One long step: prints "label ..." and, every second while it runs, the
// elapsed time on the same line; finish() (or the destructor) prints
// "label: done in 12.3 s", or "stopped after" when an exception unwinds it.
class Ticker {
 public:
  Ticker(bool enabled, std::string label);
  ~Ticker();
  void finish();
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;

 private:
  void loop();
  bool enabled_;
  std::string label_;
  std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// Prints one line per point of a sweep: "point 3/12 (d=128 seqlen=4096 mask=causal) ... elapsed 1 min 02 s".
void progress_line(bool enabled, const std::string& text);

}  // namespace attn::cli
