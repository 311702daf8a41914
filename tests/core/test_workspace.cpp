// The workspace cache (core/workspace.h) with a fake Memory: a block per
// (device, stream), reused while it is large enough, grown only after its
// stream's work, and at most a cap of blocks per device.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/workspace.h"

namespace attn::detail {
namespace {

struct FakeMemory final : WorkspaceCache::Memory {
  int64_t next = 0x1000;
  std::set<void*> live;
  std::vector<std::string> log;  // what happened, in order
  void* allocate(int device, int64_t bytes) override {
    void* p = reinterpret_cast<void*>(next);
    next += bytes;
    live.insert(p);
    log.push_back("alloc d" + std::to_string(device));
    return p;
  }
  void release(int device, void* ptr) override {
    EXPECT_EQ(live.erase(ptr), 1u) << "released a block that is not live";
    log.push_back("free d" + std::to_string(device));
  }
  void wait_stream(int device, void* stream) override {
    log.push_back("wait d" + std::to_string(device) + " s" + std::to_string(reinterpret_cast<intptr_t>(stream)));
  }
  void wait_device(int device) override { log.push_back("wait d" + std::to_string(device)); }
};

void* stream(intptr_t id) { return reinterpret_cast<void*>(id); }
const void* kPerThread = reinterpret_cast<const void*>(intptr_t{2});

TEST(Workspace, OneBlockPerStreamReused) {
  FakeMemory m;
  WorkspaceCache cache(m, kPerThread);
  void* a = cache.get(0, stream(10), 1000);
  EXPECT_EQ(cache.get(0, stream(10), 1000), a);
  EXPECT_EQ(cache.get(0, stream(10), 10), a) << "a smaller request reuses the block";
  void* b = cache.get(0, stream(11), 1000);
  EXPECT_NE(a, b) << "two streams never share a block";
  void* c = cache.get(1, stream(10), 1000);
  EXPECT_NE(a, c) << "nor two devices";
  EXPECT_EQ(cache.blocks(), 3);
  EXPECT_EQ(m.log.size(), 3u) << "three allocations, nothing waited for";
}

TEST(Workspace, GrowingWaitsForItsStreamOnly) {
  FakeMemory m;
  WorkspaceCache cache(m, kPerThread);
  void* a = cache.get(0, stream(10), 1000);
  void* b = cache.get(0, stream(11), 1000);
  m.log.clear();
  void* a2 = cache.get(0, stream(10), int64_t{64} << 20);
  EXPECT_NE(a2, a);
  ASSERT_EQ(m.log.size(), 3u);
  EXPECT_EQ(m.log[0], "wait d0 s10") << "the old block's stream finishes before the block is freed";
  EXPECT_EQ(m.log[1], "free d0");
  EXPECT_EQ(m.log[2], "alloc d0");
  EXPECT_EQ(cache.get(0, stream(11), 1000), b) << "the other stream's block is untouched";
  EXPECT_EQ(m.live.size(), 2u);
}

TEST(Workspace, CapEvictsTheLeastRecentlyUsedAfterTheDeviceIsIdle) {
  FakeMemory m;
  WorkspaceCache cache(m, kPerThread, 3);
  void* first = cache.get(0, stream(1), 100);
  cache.get(0, stream(2), 100);
  cache.get(0, stream(3), 100);
  cache.get(1, stream(9), 100);  // another device does not count
  EXPECT_EQ(cache.get(0, stream(1), 100), first);  // stream 1 is now the most recent
  m.log.clear();
  cache.get(0, stream(4), 100);
  ASSERT_EQ(m.log.size(), 3u);
  EXPECT_EQ(m.log[0], "wait d0");
  EXPECT_EQ(m.log[1], "free d0");
  EXPECT_EQ(cache.blocks(), 4);
  EXPECT_EQ(cache.get(0, stream(1), 100), first) << "the recently used block stays";
  m.log.clear();
  cache.get(0, stream(2), 100);
  EXPECT_EQ(m.log.front(), "wait d0") << "stream 2's block was the one evicted: it is made again";
}

TEST(Workspace, PerThreadDefaultStreamIsOneStreamPerThread) {
  FakeMemory m;
  WorkspaceCache cache(m, kPerThread);
  void* mine = cache.get(0, const_cast<void*>(kPerThread), 100);
  void* theirs = nullptr;
  std::thread other([&] { theirs = cache.get(0, const_cast<void*>(kPerThread), 100); });
  other.join();
  EXPECT_NE(mine, theirs);
  EXPECT_EQ(cache.get(0, const_cast<void*>(kPerThread), 100), mine);
  void* legacy = cache.get(0, nullptr, 100);
  std::thread third([&] { EXPECT_EQ(cache.get(0, nullptr, 100), legacy) << "one legacy stream for all threads"; });
  third.join();
}

}  // namespace
}  // namespace attn::detail
