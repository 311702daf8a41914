// The workspace cache (core/workspace.h) with a fake Memory: a block per
// (device, stream), reused while it is large enough, grown only after its
// stream's work, and at most a cap of blocks per device.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "attn/error.h"
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

TEST(Workspace, UnderCaptureAReadyBlockServesAndIsKeptForGood) {
  FakeMemory m;
  WorkspaceCache cache(m, kPerThread, 2);
  void* a = cache.get(0, stream(10), 1000);
  m.log.clear();
  EXPECT_EQ(cache.get(0, stream(10), 900, /*capturing=*/true), a);
  EXPECT_TRUE(m.log.empty()) << "nothing allocated or waited for while capturing";
  // Growing after the capture: a new block, and the captured one is kept (a replay reads it).
  void* grown = cache.get(0, stream(10), int64_t{8} << 20);
  EXPECT_NE(grown, a);
  EXPECT_EQ(m.live.count(a), 1u) << "the captured block was freed";
  EXPECT_EQ(cache.kept_blocks(), 1);
}

TEST(Workspace, UnderCaptureAMissingOrSmallBlockIsAnErrorThatSaysHowToSizeIt) {
  FakeMemory m;
  WorkspaceCache cache(m, kPerThread);
  try {
    cache.get(0, stream(10), 1000, true);
    ADD_FAILURE() << "allocated while capturing";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("capturing a CUDA graph"), std::string::npos) << e.what();
    EXPECT_NE(e.info().fix.find("before capturing"), std::string::npos);
    EXPECT_NE(e.info().fix.find("forward_workspace_size"), std::string::npos);
  }
  EXPECT_TRUE(m.log.empty());
  cache.get(0, stream(10), 1000);  // outside capture: made
  m.log.clear();
  EXPECT_THROW(cache.get(0, stream(10), int64_t{64} << 20, true), Error) << "growing under capture";
  EXPECT_TRUE(m.log.empty()) << "neither waited nor freed: the stream's queued work still uses the block";
  EXPECT_EQ(cache.blocks(), 1);
}

TEST(Workspace, EvictingACapturedBlockKeepsIt) {
  FakeMemory m;
  WorkspaceCache cache(m, kPerThread, 1);
  void* a = cache.get(0, stream(1), 100);
  cache.get(0, stream(1), 100, true);
  cache.get(0, stream(2), 100);  // past the cap of 1: stream 1's block leaves the pool
  EXPECT_EQ(m.live.count(a), 1u);
  EXPECT_EQ(cache.kept_blocks(), 1);
  EXPECT_EQ(cache.blocks(), 1);
}

TEST(Workspace, CallersBlockIsCheckedAndUsedWithoutThePool) {
  alignas(256) static char block[512];
  RunContext ctx;
  ctx.workspace = block;
  ctx.workspace_bytes = 512;
  EXPECT_EQ(workspace(ctx, 0, 512), block);
  EXPECT_EQ(workspace(ctx, 0, 0), nullptr) << "no bytes, no memory";
  try {
    workspace(ctx, 0, 513);
    ADD_FAILURE() << "a workspace one byte short was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.info().got, "512 bytes");
    EXPECT_EQ(e.info().expected, "at least 513 bytes");
  }
  ctx.workspace = block + 16;
  ctx.workspace_bytes = 256;
  EXPECT_THROW(workspace(ctx, 0, 64), Error) << "not 256-byte aligned";
}

TEST(Workspace, AllocatorIsAskedForTheBytesOnce) {
  alignas(256) static char block[1024];
  std::vector<int64_t> asked;
  RunContext ctx;
  ctx.workspace_allocator = [&](int64_t bytes) -> void* {
    asked.push_back(bytes);
    return block;
  };
  EXPECT_EQ(workspace(ctx, 0, 700), block);
  EXPECT_EQ(asked, std::vector<int64_t>{700});
  ctx.workspace_allocator = [](int64_t) -> void* { return nullptr; };
  EXPECT_THROW(workspace(ctx, 0, 700), Error) << "an allocator with no memory";
}

}  // namespace
}  // namespace attn::detail
