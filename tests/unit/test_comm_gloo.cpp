// GlooCollectives: groups of 1, 2 and 3 ranks as threads of this process on
// 127.0.0.1, meeting through a StoreServer on a free port. Results, then the
// ways a collective ends without its peers: abort from another thread, a peer
// that is gone, the op timeout; and re-forming the group after each. Every op
// has a finite timeout, so a failing test still ends and joins its threads.
#include <doctest/doctest.h>

#include "tests/comm_errors.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/collectives.hpp"
#include "comm/gloo_collectives.hpp"
#include "comm/tcp_store.hpp"

using namespace std::chrono_literals;
using inferd::comm::CollectiveError;
using inferd::comm::GlooCollectives;
using inferd::comm::GlooOptions;
using inferd::comm::StoreServer;
using Clock = std::chrono::steady_clock;
using Group = std::vector<std::unique_ptr<GlooCollectives>>;

using comm_test::contains;
using comm_test::error_of;

namespace {

GlooOptions options(const StoreServer& server, int rank, int size, std::chrono::milliseconds op_timeout = 30s) {
  GlooOptions o;
  o.rank = rank;
  o.size = size;
  o.store_port = server.port();
  o.rendezvous_timeout = 30s;
  o.op_timeout = op_timeout;
  return o;
}

// Runs fn(rank) on one thread per rank, joins them all, then rethrows the
// first failure (assertions stay on the test's thread).
template <class F>
void on_ranks(int size, F fn) {
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

Group form(const StoreServer& server, int size, std::chrono::milliseconds op_timeout = 30s) {
  Group g(size);
  on_ranks(size, [&](int r) { g[r] = std::make_unique<GlooCollectives>(options(server, r, size, op_timeout)); });
  return g;
}

// Integers below 2^24 add exactly in float, so sums compare with ==.
float value(int rank, size_t i) { return static_cast<float>(rank * 1000 + static_cast<int>(i % 1000)); }

// all_reduce_sum of `n` floats on every rank; true when every rank got the exact sums.
bool all_reduce_ok(Group& g, size_t n) {
  const int size = static_cast<int>(g.size());
  std::vector<std::vector<float>> data(size);
  on_ranks(size, [&](int r) {
    data[r].resize(n);
    for (size_t i = 0; i < n; ++i) data[r][i] = value(r, i);
    g[r]->all_reduce_sum(data[r].data(), n);
  });
  for (int r = 0; r < size; ++r)
    for (size_t i = 0; i < n; ++i) {
      float want = 0;
      for (int q = 0; q < size; ++q) want += value(q, i);
      if (data[r][i] != want) return false;
    }
  return true;
}



}  // namespace

TEST_SUITE("comm_gloo") {
  TEST_CASE("gloo: all_reduce_sum is exact for 2 and 3 ranks, odd, tiny and large sizes") {
    for (int size : {2, 3}) {
      CAPTURE(size);
      StoreServer server("127.0.0.1", 0);
      Group g = form(server, size);
      for (size_t n : {size_t{1}, size_t{7}, size_t{1000}, size_t{100003}, size_t{1} << 20}) {
        CAPTURE(n);
        CHECK(all_reduce_ok(g, n));
      }
    }
  }

  TEST_CASE("gloo: all_gather puts each rank's block in rank order; broadcast from root 1; barrier") {
    StoreServer server("127.0.0.1", 0);
    const int size = 3;
    Group g = form(server, size);
    const size_t n = 5;
    std::vector<std::vector<float>> out(size, std::vector<float>(n * size, -1.0f));
    std::vector<std::string> got(size);
    std::atomic<bool> last_entered{false};
    std::vector<int> waited(size);  // not vector<bool>: ranks write their own element at once
    on_ranks(size, [&](int r) {
      std::vector<float> in(n);
      for (size_t i = 0; i < n; ++i) in[i] = static_cast<float>(r * 10 + static_cast<int>(i));
      g[r]->all_gather(in.data(), n, out[r].data());

      char buf[32] = {};
      if (r == 1) std::strcpy(buf, "from rank 1");
      g[r]->broadcast(buf, sizeof buf, 1);
      got[r] = buf;

      // No rank leaves the barrier before the last one has entered it.
      if (r == 2) {
        std::this_thread::sleep_for(300ms);
        last_entered = true;
      }
      g[r]->barrier();
      waited[r] = last_entered;
    });
    for (int r = 0; r < size; ++r) {
      CAPTURE(r);
      for (int q = 0; q < size; ++q)
        for (size_t i = 0; i < n; ++i) CHECK(out[r][q * n + i] == static_cast<float>(q * 10 + static_cast<int>(i)));
      CHECK(got[r] == "from rank 1");
      CHECK(waited[r]);
    }
  }

  TEST_CASE("gloo: a group of one; bad arguments are refused before any traffic") {
    StoreServer server("127.0.0.1", 0);
    GlooCollectives one(options(server, 0, 1));
    std::vector<float> x{1, 2, 3};
    one.all_reduce_sum(x.data(), x.size());
    CHECK(x == std::vector<float>{1, 2, 3});
    std::vector<float> out(3);
    one.all_gather(x.data(), 3, out.data());
    CHECK(out == x);
    one.broadcast(x.data(), sizeof(float) * 3, 0);
    one.barrier();
    one.all_reduce_sum(nullptr, 0);
    CHECK_THROWS_AS(one.broadcast(x.data(), 4, 1), std::invalid_argument);
    CHECK_THROWS_AS(one.all_reduce_sum(nullptr, 3), std::invalid_argument);
    CHECK_THROWS_AS(GlooCollectives(options(server, 2, 2)), std::invalid_argument);
  }

  TEST_CASE("gloo: ranks listen on a named interface; an unknown one is a clear error") {
    StoreServer server("127.0.0.1", 0);
    Group g(2);
    on_ranks(2, [&](int r) {
      auto o = options(server, r, 2);
      o.iface = "lo";
      g[r] = std::make_unique<GlooCollectives>(o);
    });
    CHECK(all_reduce_ok(g, 1000));
    auto o = options(server, 0, 1);
    o.iface = "nosuchif0";
    CHECK_THROWS_WITH_AS(GlooCollectives{o}, doctest::Contains("no network interface nosuchif0"), CollectiveError);
  }

  TEST_CASE("gloo: abort from another thread ends a blocked all_reduce promptly; reinit re-forms the group") {
    StoreServer server("127.0.0.1", 0);
    Group g = form(server, 2, 60s);  // the op timeout is not what ends it
    std::vector<float> x(1000, 1.0f);
    // Rank 1 never joins this all_reduce.
    auto blocked = std::async(std::launch::async, [&] {
      const std::string e = error_of([&] { g[0]->all_reduce_sum(x.data(), x.size()); });
      return std::make_pair(e, Clock::now());
    });
    std::this_thread::sleep_for(300ms);
    REQUIRE(blocked.wait_for(0s) == std::future_status::timeout);
    const auto t0 = Clock::now();
    std::thread([&] { g[0]->abort("operator said so"); }).join();
    REQUIRE(blocked.wait_for(70s) == std::future_status::ready);
    const auto [e, t1] = blocked.get();
    MESSAGE("abort to throw: " << std::chrono::duration_cast<std::chrono::milliseconds>(t1 - t0).count() << " ms");
    CHECK(t1 - t0 < 5s);
    CHECK(contains(e, "all_reduce_sum on rank 0 of 2 (generation 0)"));
    CHECK(contains(e, "aborted: operator said so"));
    // Aborted stays aborted until reinit, whatever the op.
    CHECK(contains(error_of([&] { g[0]->barrier(); }), "aborted: operator said so"));

    on_ranks(2, [&](int r) { g[r]->reinit(1); });
    CHECK(g[0]->generation() == 1);
    CHECK(g[1]->generation() == 1);
    CHECK(all_reduce_ok(g, 1000));
  }

  TEST_CASE("gloo: abort interrupts a reinit that waits for a peer") {
    StoreServer server("127.0.0.1", 0);
    Group g = form(server, 2);
    auto waiting = std::async(std::launch::async, [&] { return error_of([&] { g[0]->reinit(1); }); });
    std::this_thread::sleep_for(300ms);
    const auto t0 = Clock::now();
    g[0]->abort("give up");
    REQUIRE(waiting.wait_for(40s) == std::future_status::ready);
    CHECK(Clock::now() - t0 < 5s);
    CHECK(contains(waiting.get(), "aborted: give up"));
    on_ranks(2, [&](int r) { g[r]->reinit(2); });
    CHECK(all_reduce_ok(g, 10));
  }

  TEST_CASE("gloo: a peer that is gone fails the other rank's op instead of hanging") {
    StoreServer server("127.0.0.1", 0);
    Group g = form(server, 2, 5s);
    g[1].reset();  // its connections close
    std::vector<float> x(1000, 1.0f);
    const auto t0 = Clock::now();
    const std::string e = error_of([&] { g[0]->all_reduce_sum(x.data(), x.size()); });
    CHECK(Clock::now() - t0 < 20s);
    CHECK(contains(e, "all_reduce_sum on rank 0 of 2"));
  }

  TEST_CASE("gloo: an op timeout fails the op, and the peer's next op at once; reinit recovers") {
    StoreServer server("127.0.0.1", 0);
    Group g(2);
    on_ranks(2, [&](int r) { g[r] = std::make_unique<GlooCollectives>(options(server, r, 2, r == 0 ? 500ms : 60s)); });
    std::vector<float> x(1000, 1.0f);
    auto t0 = Clock::now();
    const std::string e = error_of([&] { g[0]->all_reduce_sum(x.data(), x.size()); });
    CHECK(Clock::now() - t0 < 10s);
    CHECK(contains(e, "all_reduce_sum on rank 0 of 2"));
    CHECK(contains(e, "Timed out"));
    CHECK(contains(error_of([&] { g[0]->barrier(); }), "all_reduce_sum failed earlier"));
    // Rank 0 failed its connections: rank 1 does not wait out its own 60 s.
    t0 = Clock::now();
    CHECK_FALSE(error_of([&] { g[1]->barrier(); }).empty());
    CHECK(Clock::now() - t0 < 10s);
    on_ranks(2, [&](int r) { g[r]->reinit(1); });
    CHECK(all_reduce_ok(g, 1000));
  }
}
