// Progress lines and the elapsed-time ticker (see progress.h).
#include "progress.h"

#include <unistd.h>

#include <cstdio>
#include <exception>

namespace attn::cli {

bool progress_wanted(bool quiet) { return !quiet && isatty(STDERR_FILENO) == 1; }

std::string format_seconds(double s) {
  char buf[48];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%.1f s", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%d min %02d s", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  else
    std::snprintf(buf, sizeof buf, "%d h %02d min", static_cast<int>(s) / 3600, static_cast<int>(s) / 60 % 60);
  return buf;
}

Ticker::Ticker(bool enabled, std::string label)
    : enabled_(enabled), label_(std::move(label)), start_(std::chrono::steady_clock::now()) {
  if (!enabled_) return;
  std::fprintf(stderr, "%s ...", label_.c_str());
  std::fflush(stderr);
  thread_ = std::thread([this] { loop(); });
}

Ticker::~Ticker() { finish(); }

void Ticker::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; })) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::fprintf(stderr, "\r\033[K%s ... %s", label_.c_str(), format_seconds(s).c_str());
    std::fflush(stderr);
  }
}

void Ticker::finish() {
  if (!enabled_) return;
  enabled_ = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // Unwinding (the step threw): its error follows; do not call it done.
  const char* how = std::uncaught_exceptions() > 0 ? "stopped after" : "done in";
  std::fprintf(stderr, "\r\033[K%s: %s %s\n", label_.c_str(), how, format_seconds(s).c_str());
  std::fflush(stderr);
}

void progress_line(bool enabled, const std::string& text) {
  if (!enabled) return;
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
}

}  // namespace attn::cli
