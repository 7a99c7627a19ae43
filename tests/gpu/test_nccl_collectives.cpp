// NcclCollectives on device buffers: a group of one rank (every op, abort,
// reinit), and where the machine has two GPUs, a group of two (sums, and an
// abort that ends an all_reduce a peer never joins). The ranks meet through a
// StoreServer on 127.0.0.1.
//
// Needs a CUDA device: without one the binary exits 77 (meson: skipped), or
// fails when INFERD_REQUIRE_GPU is set.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "tests/comm_errors.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include "comm/nccl_collectives.hpp"
#include "comm/tcp_store.hpp"

using namespace std::chrono_literals;
using inferd::comm::CollectiveError;
using inferd::comm::NcclCollectives;
using inferd::comm::NcclOptions;
using inferd::comm::StoreServer;
using Clock = std::chrono::steady_clock;

using comm_test::contains;
using comm_test::error_of;

namespace {

int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// Device memory holding `n` floats, freed on scope exit.
struct DeviceFloats {
  explicit DeviceFloats(size_t n) : n(n) {
    void* raw = nullptr;
    REQUIRE(cudaMalloc(&raw, n * sizeof(float)) == cudaSuccess);
    p = static_cast<float*>(raw);
  }
  ~DeviceFloats() { cudaFree(p); }
  void put(const std::vector<float>& v) {
    REQUIRE(cudaMemcpy(p, v.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  std::vector<float> get() const {
    std::vector<float> v(n);
    REQUIRE(cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
  }
  float* p = nullptr;
  size_t n;
};

std::vector<float> ramp(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i % 1000);
  return v;
}

NcclOptions options(const StoreServer& server, int rank, int size, int device) {
  NcclOptions o;
  o.rank = rank;
  o.size = size;
  o.device = device;
  o.store_port = server.port();
  o.rendezvous_timeout = 60s;
  o.op_timeout = 60s;
  return o;
}



}  // namespace

int main(int argc, char** argv) {
  if (device_count() == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return std::getenv("INFERD_REQUIRE_GPU") ? 1 : 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}

TEST_SUITE("nccl") {
  TEST_CASE("nccl: one rank: all_reduce, all_gather, broadcast, barrier on device buffers") {
    StoreServer server("127.0.0.1", 0);
    NcclCollectives one(options(server, 0, 1, 0));
    CHECK(one.rank() == 0);
    CHECK(one.size() == 1);
    for (size_t n : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
      CAPTURE(n);
      DeviceFloats x(n);
      x.put(ramp(n, 3));
      one.all_reduce_sum(x.p, n);
      CHECK(x.get() == ramp(n, 3));  // the sum over one rank
      DeviceFloats out(n);
      one.all_gather(x.p, n, out.p);
      CHECK(out.get() == ramp(n, 3));
    }
    DeviceFloats b(16);
    b.put(ramp(16, 7));
    one.broadcast(b.p, 16 * sizeof(float), 0);
    CHECK(b.get() == ramp(16, 7));
    one.barrier();
    one.all_reduce_sum(nullptr, 0);
    CHECK_THROWS_AS(one.broadcast(b.p, 4, 1), std::invalid_argument);
  }

  TEST_CASE("nccl: one rank: after abort every op throws at once; reinit makes a working group") {
    StoreServer server("127.0.0.1", 0);
    NcclCollectives one(options(server, 0, 1, 0));
    DeviceFloats x(1000);
    x.put(ramp(1000, 1));
    one.abort("test abort");
    const auto t0 = Clock::now();
    CHECK(contains(error_of([&] { one.all_reduce_sum(x.p, 1000); }), "aborted: test abort"));
    const std::string e = error_of([&] { one.barrier(); });
    CHECK(contains(e, "barrier on rank 0 of 1 (generation 0)"));
    CHECK(contains(e, "aborted: test abort"));
    CHECK(Clock::now() - t0 < 5s);
    one.reinit(1);
    CHECK(one.generation() == 1);
    one.all_reduce_sum(x.p, 1000);
    CHECK(x.get() == ramp(1000, 1));
    one.barrier();
  }

  TEST_CASE("nccl: two GPUs: exact sums; abort ends an all_reduce the peer never joins; reinit") {
    if (device_count() < 2) {
      MESSAGE("one GPU: the two-rank case does not run");
      return;
    }
    StoreServer server("127.0.0.1", 0);
    std::vector<std::unique_ptr<NcclCollectives>> g(2);
    auto on_ranks = [&](auto fn) {
      std::vector<std::exception_ptr> errors(2);
      std::vector<std::thread> threads;
      for (int r = 0; r < 2; ++r)
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
    };
    on_ranks([&](int r) { g[r] = std::make_unique<NcclCollectives>(options(server, r, 2, r)); });
    const size_t n = 100003;
    std::vector<std::vector<float>> got(2);
    on_ranks([&](int r) {
      cudaSetDevice(r);
      DeviceFloats x(n);
      x.put(ramp(n, static_cast<float>(r * 1000)));
      g[r]->all_reduce_sum(x.p, n);
      got[r] = x.get();
    });
    const std::vector<float> want = [&] {
      auto a = ramp(n, 0), b = ramp(n, 1000);
      for (size_t i = 0; i < n; ++i) a[i] += b[i];
      return a;
    }();
    CHECK(got[0] == want);
    CHECK(got[1] == want);

    auto blocked = std::async(std::launch::async, [&] {
      cudaSetDevice(0);
      DeviceFloats x(n);
      return error_of([&] { g[0]->all_reduce_sum(x.p, n); });
    });
    std::this_thread::sleep_for(500ms);
    const auto t0 = Clock::now();
    g[0]->abort("peer is stuck");
    REQUIRE(blocked.wait_for(70s) == std::future_status::ready);
    CHECK(Clock::now() - t0 < 5s);
    CHECK(contains(blocked.get(), "aborted: peer is stuck"));

    on_ranks([&](int r) { g[r]->reinit(1); });
    on_ranks([&](int r) {
      cudaSetDevice(r);
      DeviceFloats x(n);
      x.put(ramp(n, static_cast<float>(r * 1000)));
      g[r]->all_reduce_sum(x.p, n);
      got[r] = x.get();
    });
    CHECK(got[0] == want);
    CHECK(got[1] == want);
  }
}
