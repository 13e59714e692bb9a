// StopMatcher on its own: text is shown as soon as it cannot be part of a stop string, a stop
// string is never shown even in part (however the pieces split it), the text is cut at the
// earliest stop, and flush() gives back what was held only when nothing matched.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "worker/engine/stop_matcher.h"

namespace hearth {
namespace {

// Feeds `pieces` one by one; returns everything shown, flush included.
std::string shown(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) out += m.append(p);
  return out + m.flush();
}

TEST(StopMatcher, WithoutStopsEverythingIsShownAtOnce) {
  StopMatcher m({});
  EXPECT_EQ(m.append("Once "), "Once ");
  EXPECT_EQ(m.append("upon"), "upon");
  EXPECT_EQ(m.flush(), "");
  EXPECT_FALSE(m.matched());
}

TEST(StopMatcher, TextThatMayStartAStopIsHeldUntilItCannot) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.append("the E"), "the ");  // "E" may grow into "END"
  EXPECT_EQ(m.append("N"), "");          // "EN" still may
  EXPECT_EQ(m.append("D?"), "");         // it did: nothing of it is shown
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.flush(), "");

  StopMatcher n({"END"});
  EXPECT_EQ(n.append("the E"), "the ");
  EXPECT_EQ(n.append("NJOY"), "ENJOY");  // it did not: the held text comes out in order
  EXPECT_FALSE(n.matched());
}

TEST(StopMatcher, AStopSplitOverManyPiecesIsCutBeforeItsFirstByte) {
  const std::string text = "one two<|stop|> three";
  // Every way of cutting the text in two, and one byte at a time.
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    StopMatcher m({"<|stop|>"});
    EXPECT_EQ(shown(m, {text.substr(0, cut), text.substr(cut)}), "one two") << "cut at " << cut;
    EXPECT_TRUE(m.matched()) << "cut at " << cut;
  }
  StopMatcher bytes({"<|stop|>"});
  std::vector<std::string> pieces;
  for (char c : text) pieces.emplace_back(1, c);
  EXPECT_EQ(shown(bytes, pieces), "one two");
}

TEST(StopMatcher, TheEarliestOfSeveralStopsWinsWhateverTheirOrder) {
  StopMatcher m({"world", "lo"});
  EXPECT_EQ(m.append("hello world"), "hel");
  EXPECT_TRUE(m.matched());
  StopMatcher n({"lo", "world"});
  EXPECT_EQ(n.append("hello world"), "hel");
}

// The engine stops appending at a match; were it to go on, the cut text must stay cut.
TEST(StopMatcher, NothingIsShownAfterAMatch) {
  StopMatcher m({"\n"});
  EXPECT_EQ(m.append("a line\nmore"), "a line");
  EXPECT_EQ(m.append(" and more"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, FlushGivesBackAHeldPrefixThatNeverBecameAStop) {
  StopMatcher m({"###"});
  EXPECT_EQ(m.append("title ##"), "title ");
  EXPECT_FALSE(m.matched());
  EXPECT_EQ(m.flush(), "##");  // the request ended (a token budget): it is text after all
}

TEST(StopMatcher, AStopInsideMultibyteTextCutsAtItsStart) {
  // The pieces split "é" between its two bytes (a token may end mid-character): the stop that
  // contains it is still found, and nothing of it shown.
  StopMatcher m({"caf\xc3\xa9!"});
  EXPECT_EQ(shown(m, {"un caf\xc3", "\xa9! fin"}), "un ");
  EXPECT_TRUE(m.matched());
}

}  // namespace
}  // namespace hearth
