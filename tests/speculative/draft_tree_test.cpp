// nf::DraftTree (npuforge/speculative.hpp), the rows of a speculative step.
#include <gtest/gtest.h>
#include <npuforge/speculative.hpp>

// The tree a decoder's step walks (npuforge/speculative.hpp): draft rows are found by (parent,
// token) and the first row of a token wins; computed-only rows are never entered; a row hangs
// under an earlier row only.
TEST(DraftTree, TheWalkFindsDraftRowsOnly) {
  nf::DraftTree t(5);
  const int32_t window = t.add_unverified(7, 0, NF_ROW_SEES_PREFIX);
  const int32_t a = t.add_draft(7, 0);
  const int32_t again = t.add_draft(7, 0);
  const int32_t b = t.add_draft(9, a);
  EXPECT_EQ(t.child(0, 7), a) << "the first draft row of a token, not the window row or the repeat";
  EXPECT_NE(again, a);
  EXPECT_EQ(t.child(a, 9), b);
  EXPECT_EQ(t.child(window, 9), -1);
  EXPECT_EQ(t.child(b, 7), -1);
  EXPECT_EQ(t.tokens(), (std::vector<int32_t>{5, 7, 7, 7, 9}));
  EXPECT_EQ(t.parents(), (std::vector<int32_t>{-1, 0, 0, 0, a}));
  EXPECT_EQ(t.flags(), (std::vector<uint32_t>{0, NF_ROW_SEES_PREFIX, 0, 0, 0}));
  EXPECT_THROW(t.add_draft(1, 5), nf::Error);
  EXPECT_THROW(t.add_unverified(1, -1), nf::Error);
}

