// ClientEventQueues without sockets: a client's events come back in order, a reply's worth at a
// time; an events call waits only while the client has requests in flight; a client past its
// bound is held until it reads down to half; a refusal or a gone client is accounted for.
#include <gtest/gtest.h>

#include "ipc/errors.h"
#include "worker/client_event_queues.h"

namespace hearth {
namespace {

using Queues = ClientEventQueues;

RequestOutput tokens(const std::string& id, int count, const std::string& text = "x") {
  RequestOutput out;
  out.id = id;
  for (int i = 0; i < count; ++i) {
    TokenOutput t;
    t.token = i;
    t.text = t.visible = text;
    out.tokens.push_back(t);
  }
  return out;
}

RequestOutput finished(const std::string& id) {
  RequestOutput out;
  out.id = id;
  out.finish = FinishOutput{};
  return out;
}

// The events of a reply, as "id:token" or "id:done".
std::vector<std::string> names(const nlohmann::json& reply) {
  std::vector<std::string> out;
  for (const nlohmann::json& e : reply.at("events"))
    out.push_back(e.at("id").get<std::string>() + ":" +
                  (e.contains("token") ? std::to_string(e.at("token").get<int>()) : "done"));
  return out;
}

TEST(ClientEventQueuesTest, NothingInFlightAnswersAtOnceWithNothing) {
  Queues q(1 << 20, 1 << 20);
  auto taken = q.events(1, 10);
  ASSERT_TRUE(taken);
  EXPECT_TRUE(taken->reply.at("events").empty());
  EXPECT_FALSE(taken->reply.at("more").get<bool>());
  EXPECT_FALSE(taken->released);
}

TEST(ClientEventQueuesTest, ACallWaitsWhileInFlightAndIsAnsweredWithTheEventsInOrder) {
  Queues q(1 << 20, 1 << 20);
  q.submitted(1);
  EXPECT_FALSE(q.events(1, 10));
  EXPECT_TRUE(q.answers().empty());                   // nothing to say yet
  EXPECT_THROW(q.events(1, 11), ipc::ProtocolError);  // one waiting call per client

  EXPECT_FALSE(q.add(1, tokens("r1", 2)));
  EXPECT_FALSE(q.add(1, finished("r1")));
  auto answers = q.answers();
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].client, 1u);
  EXPECT_EQ(answers[0].request, 10u);
  EXPECT_EQ(names(answers[0].taken.reply), (std::vector<std::string>{"r1:0", "r1:1", "r1:done"}));
  EXPECT_TRUE(q.answers().empty());  // answered once
  EXPECT_TRUE(q.drained());
}

TEST(ClientEventQueuesTest, ClientsKeepTheirOwnEvents) {
  Queues q(1 << 20, 1 << 20);
  q.submitted(1);
  q.submitted(2);
  q.add(1, tokens("r1", 1));
  q.add(2, tokens("r1", 2));
  EXPECT_EQ(names(q.events(1, 5)->reply), (std::vector<std::string>{"r1:0"}));
  EXPECT_EQ(names(q.events(2, 5)->reply), (std::vector<std::string>{"r1:0", "r1:1"}));
}

TEST(ClientEventQueuesTest, AReplyCarriesAtMostItsBytesButAtLeastOneEvent) {
  Queues probe(1 << 20, 1 << 20);
  probe.submitted(1);
  probe.add(1, tokens("r1", 1));
  const std::size_t event_bytes = probe.queued_bytes(1);

  Queues q(1 << 20, event_bytes * 2);
  q.submitted(1);
  q.add(1, tokens("r1", 5));
  auto first = q.events(1, 1);
  EXPECT_EQ(first->reply.at("events").size(), 2u);
  EXPECT_TRUE(first->reply.at("more").get<bool>());
  EXPECT_EQ(q.queued_bytes(1), 3 * event_bytes);

  Queues tiny(1 << 20, 1);  // smaller than any event: one each
  tiny.submitted(1);
  tiny.add(1, tokens("r1", 2));
  EXPECT_EQ(tiny.events(1, 1)->reply.at("events").size(), 1u);
}

TEST(ClientEventQueuesTest, ASlowReaderIsHeldUntilItReadsDownToHalf) {
  Queues probe(1 << 20, 1 << 20);
  probe.submitted(1);
  probe.add(1, tokens("r1", 1));
  const std::size_t event_bytes = probe.queued_bytes(1);

  // Held past 4 events' worth; let go at 2 or fewer; replies of one event each.
  Queues q(4 * event_bytes, event_bytes);
  q.submitted(1);
  EXPECT_FALSE(q.add(1, tokens("r1", 4)));  // at the bound, not past it
  EXPECT_FALSE(q.held(1));
  EXPECT_TRUE(q.add(1, tokens("r1", 2)));  // past it: held now, said once
  EXPECT_TRUE(q.held(1));
  EXPECT_FALSE(q.add(1, tokens("r1", 1)));  // already held
  EXPECT_EQ(q.queued_bytes(1), 7 * event_bytes);

  for (int read = 1; read <= 4; ++read) {
    auto taken = q.events(1, read);
    EXPECT_FALSE(taken->released) << read;
  }
  auto fifth = q.events(1, 5);  // 2 left: half the bound
  EXPECT_TRUE(fifth->released);
  EXPECT_FALSE(q.held(1));
}

TEST(ClientEventQueuesTest, ARefusedSubmitEndsTheWaitOfItsClient) {
  Queues q(1 << 20, 1 << 20);
  q.submitted(1);
  EXPECT_FALSE(q.events(1, 7));
  auto answer = q.refused(1);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->request, 7u);
  EXPECT_TRUE(answer->taken.reply.at("events").empty());
  EXPECT_FALSE(q.refused(2));  // a client never seen: nothing
}

TEST(ClientEventQueuesTest, AGoneClientsOutputsAreDropped) {
  Queues q(1, 1 << 20);
  q.submitted(1);
  q.add(1, tokens("r1", 1));
  q.disconnected(1);
  EXPECT_TRUE(q.drained());
  EXPECT_FALSE(q.add(1, tokens("r1", 3)));  // not held: there is nobody to hold
  EXPECT_TRUE(q.drained());
  EXPECT_TRUE(q.answers().empty());
}

}  // namespace
}  // namespace hearth
