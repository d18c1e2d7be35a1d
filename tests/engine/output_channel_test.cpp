#include "engine/output_channel.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

namespace serve8 {
namespace {

OutputEvent token(int32_t id) {
  OutputEvent ev;
  ev.new_ids = {id};
  return ev;
}

std::vector<int32_t> drain(RequestStream& s, int n) {
  std::vector<int32_t> got;
  for (int i = 0; i < n; ++i) {
    const auto ev = s.next(std::chrono::seconds(10));
    if (!ev) break;
    got.push_back(ev->new_ids.at(0));
  }
  return got;
}

TEST(OutputDispatcher, WithoutAThreadFlushDeliversInline) {
  OutputDispatcher d;
  auto s = std::make_shared<RequestStream>("a");
  d.add(s, token(7));
  EXPECT_FALSE(s->next(std::chrono::milliseconds(0))) << "add() only queues";
  d.flush();
  const auto ev = s->next(std::chrono::milliseconds(0));
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->new_ids.at(0), 7);
}

// Many streams read by their own threads while steps of events are handed over: every stream sees
// its events once each, in the order they were added.
TEST(OutputDispatcher, EachStreamKeepsItsOrderAcrossSteps) {
  constexpr int kStreams = 64, kSteps = 200;
  OutputDispatcher d;
  d.start();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < kStreams; ++i) streams.push_back(std::make_shared<RequestStream>(std::to_string(i)));
  std::vector<std::vector<int32_t>> got(kStreams);
  std::vector<std::thread> readers;
  for (int i = 0; i < kStreams; ++i) readers.emplace_back([&, i] { got[i] = drain(*streams[i], kSteps); });
  for (int step = 0; step < kSteps; ++step) {
    for (int i = 0; i < kStreams; ++i)
      if ((i + step) % 3 != 0) d.add(streams[i], token(step));  // not every stream every step
    d.flush();
  }
  for (int step = 0; step < kSteps; ++step)  // the rest, so each stream gets kSteps events
    for (int i = 0; i < kStreams; ++i)
      if ((i + step) % 3 == 0) d.add(streams[i], token(kSteps + step));
  d.stop();
  for (auto& t : readers) t.join();
  for (int i = 0; i < kStreams; ++i) {
    std::vector<int32_t> want;
    for (int step = 0; step < kSteps; ++step)
      if ((i + step) % 3 != 0) want.push_back(step);
    for (int step = 0; step < kSteps; ++step)
      if ((i + step) % 3 == 0) want.push_back(kSteps + step);
    EXPECT_EQ(got[i], want) << "stream " << i;
  }
}

TEST(OutputDispatcher, StopDeliversWhatWasNotFlushed) {
  OutputDispatcher d;
  d.start();
  auto s = std::make_shared<RequestStream>("a");
  for (int i = 0; i < 1000; ++i) d.add(s, token(i));
  d.stop();
  std::vector<int32_t> want(1000);
  for (int i = 0; i < 1000; ++i) want[i] = i;
  EXPECT_EQ(drain(*s, 1000), want);
}

}  // namespace
}  // namespace serve8
