// How many drafts a sequence carries next, from how its last drafts fared.
// A verify step costs more than a plain decode step for each draft it carries
// (on a 2-core CPU five drafts made a step about 1.8x as long), and a rejected
// draft buys nothing, so drafts pay only where they are accepted. The pace
// follows each sequence's acceptance: one more draft than were just accepted
// (so a run of full acceptances grows it back to the most), and after repeated
// misses of even a single draft, a pause that doubles each time it recurs.
#pragma once

namespace inferd::engine {

class DraftPace {
 public:
  // Misses in a row of a single draft before pausing, and the longest pause (steps).
  static constexpr int kMissesBeforePause = 2;
  static constexpr int kLongestPause = 64;

  explicit DraftPace(int most) : most_(most), k_(most) {}

  // The most drafts to ask for this decode step: 0 while paused (each call is
  // one step of the pause).
  int next() {
    if (pause_ > 0) {
      --pause_;
      return 0;
    }
    return k_;
  }

  // A verify step's outcome: `drafted` drafts fed, the first `accepted` kept.
  void record(int drafted, int accepted) {
    if (drafted <= 0) return;
    k_ = accepted + 1 < most_ ? accepted + 1 : most_;
    if (accepted > 0) {
      misses_ = 0;
      backoff_ = 1;
      return;
    }
    if (++misses_ < kMissesBeforePause) return;
    misses_ = 0;
    pause_ = backoff_;
    backoff_ = backoff_ * 2 < kLongestPause ? backoff_ * 2 : kLongestPause;
  }

 private:
  int most_;
  int k_;
  int misses_ = 0;   // verify steps in a row that kept no draft
  int pause_ = 0;    // steps left without drafts
  int backoff_ = 1;  // the next pause's length
};

}  // namespace inferd::engine
