// A stage's ETA (common/util.h PhaseEta): the time left at the rate of the current phase,
// which starts over when the count goes back (seqmse: the search, then its calibration).
#include <gtest/gtest.h>

#include "common/util.h"

using nf::host::PhaseEta;

TEST(PhaseEta, NothingBeforeTwoSecondsOrWithoutProgress) {
  PhaseEta eta;
  EXPECT_FALSE(eta.update(0, 100, 5.0));   // no rate yet
  EXPECT_FALSE(eta.update(10, 100, 1.5));  // too early to tell
  EXPECT_FALSE(eta.update(100, 100, 9.0)); // finished
}

TEST(PhaseEta, RemainingTimeAtTheRateSoFar) {
  PhaseEta eta;
  auto left = eta.update(25, 100, 10.0);
  ASSERT_TRUE(left);
  EXPECT_DOUBLE_EQ(*left, 30.0);
}

// A slow first phase (100 steps in 1000 s) then a fast one (1 s a step): 20 steps into the
// second phase about 80 s are left, not the ~4000 s the whole stage's rate would say.
TEST(PhaseEta, ANewPhaseIsMeasuredFromWhereItBegan) {
  PhaseEta eta;
  for (int i = 1; i <= 100; ++i) eta.update(i, 100, 10.0 * i);
  auto left = eta.update(1, 100, 1001.0);
  EXPECT_FALSE(left) << "the new phase has not run 2 s";
  left = eta.update(20, 100, 1020.0);
  ASSERT_TRUE(left);
  EXPECT_NEAR(*left, 76.0, 1e-9);  // 19 s for 20 steps since 1001 s, measured from the restart
}
