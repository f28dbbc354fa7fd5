// The cycle profile (`qpu story --profile`) on synthetic forwards: families by name with
// numbers collapsed, value-token forwards charged to the control they follow, every
// cycle, second and sublayer accounted once, and bad ids rejected.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "runner/cycle_profile.h"

namespace qpu::runner {
namespace {

TEST(MicroOpFamily, CollapsesEveryNumber) {
  EXPECT_EQ(micro_op_family("FFN(2).17"), "FFN(#).#");
  EXPECT_EQ(micro_op_family("SCORE(4).12"), "SCORE(#).#");
  EXPECT_EQ(micro_op_family("TOK.511"), "TOK.#");
  EXPECT_EQ(micro_op_family("SLOW(0).7.3"), "SLOW(#).#.#");
  EXPECT_EQ(micro_op_family("HEAD"), "HEAD");
  EXPECT_EQ(micro_op_family("QKV.0"), "QKV.#");
  EXPECT_EQ(micro_op_family(""), "");
}

TEST(CycleProfile, ChargesEveryForwardToItsFamilyAndValuePartsToTheirControl) {
  constexpr int64_t kValues = 10;
  const std::vector<std::string> names = {"HDR", "FFN(0).0", "FFN(0).1", "FFN(1).0", "INC", "HEAD", "TOK.3"};
  CycleProfile profile(kValues, names);
  std::mt19937 rng(20261201);
  std::uniform_int_distribution<int64_t> value(0, kValues - 1);
  std::uniform_int_distribution<int> control(0, static_cast<int>(names.size()) - 1);
  // What the profile must report, kept here by the test's own bookkeeping.
  std::map<std::string, ProfileRow> want;
  auto charge = [&](const std::string& family, double s, int64_t run) {
    ProfileRow& r = want[family];
    r.family = family;
    ++r.cycles;
    r.seconds += s;
    r.sublayers_run += run;
  };
  // Values before any control (not a machine stream, but accounted).
  profile.add(value(rng), 0.5, 7);
  charge("(values)", 0.5, 7);
  for (int i = 0; i < 2000; ++i) {
    const int c = control(rng);
    const std::string& name = names[static_cast<size_t>(c)];
    const std::string family = name == "FFN(0).0" || name == "FFN(0).1" || name == "FFN(1).0" ? "FFN(#).#"
                               : name == "TOK.3"                                             ? "TOK.#"
                                                                                             : name;
    const double s = 0.25 * static_cast<double>(i % 8);  // exact in binary: sums compare exactly
    profile.add(kValues + c, s, i % 5);
    charge(family, s, i % 5);
    const int parts = i % 4;  // 0..3 value tokens after it
    for (int p = 0; p < parts; ++p) {
      profile.add(value(rng), 0.125, 2);
      charge(family + " parts", 0.125, 2);
    }
  }
  const std::vector<ProfileRow> rows = profile.rows();
  ASSERT_EQ(rows.size(), want.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const ProfileRow& r = rows[i];
    ASSERT_TRUE(want.count(r.family)) << r.family;
    EXPECT_EQ(r.cycles, want[r.family].cycles) << r.family;
    EXPECT_EQ(r.seconds, want[r.family].seconds) << r.family;
    EXPECT_EQ(r.sublayers_run, want[r.family].sublayers_run) << r.family;
    if (i > 0) {
      EXPECT_GE(rows[i - 1].seconds, r.seconds);
      if (rows[i - 1].seconds == r.seconds) {
        EXPECT_LT(rows[i - 1].family, r.family);  // ties by name
      }
    }
  }
  EXPECT_TRUE(want.count("FFN(#).# parts"));
  EXPECT_TRUE(want.count("TOK.# parts"));
}

TEST(CycleProfile, RejectsIdsOutsideTheVocabularyAndAnEmptyOne) {
  CycleProfile profile(4, {"HDR", "DONE"});
  EXPECT_THROW(profile.add(-1, 0.0, 0), Error);
  EXPECT_THROW(profile.add(6, 0.0, 0), Error);
  profile.add(5, 0.0, 0);  // DONE: the last id
  ASSERT_EQ(profile.rows().size(), 1u);
  EXPECT_EQ(profile.rows()[0].family, "DONE");
  EXPECT_THROW(CycleProfile(4, {}), Error);
}

}  // namespace
}  // namespace qpu::runner
