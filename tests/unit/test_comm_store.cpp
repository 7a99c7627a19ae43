// StoreServer and TcpStore over real loopback sockets: values, waiting for
// keys another client sets, and every way a call ends without its key
// (timeout, no server, server gone, interrupt, garbage on the wire).
#include <doctest/doctest.h>

#include "tests/comm_errors.hpp"

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "comm/collectives.hpp"
#include "comm/tcp_store.hpp"

using namespace std::chrono_literals;
using inferd::comm::CollectiveError;
using inferd::comm::StoreServer;
using inferd::comm::TcpStore;
using Clock = std::chrono::steady_clock;

using comm_test::contains;
using comm_test::error_of;

namespace {

std::vector<char> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<char>& v) { return {v.begin(), v.end()}; }


}  // namespace

TEST_SUITE("comm_store") {
  TEST_CASE("store: set then get; get and wait block until another client sets the keys") {
    StoreServer server("127.0.0.1", 0);
    REQUIRE(server.port() != 0);
    TcpStore a("127.0.0.1", server.port(), 10s);
    TcpStore b("127.0.0.1", server.port(), 10s);
    a.set("k", bytes("v1"));
    CHECK(text(b.get("k")) == "v1");
    a.set("k", bytes("v2"));  // a set replaces
    CHECK(text(b.get("k")) == "v2");
    a.set("empty", {});
    CHECK(b.get("empty").empty());

    auto later = std::async(std::launch::async, [&] {
      std::this_thread::sleep_for(200ms);
      a.set("x", bytes("late"));
      a.set("y", bytes("later"));
    });
    b.wait({"x", "y"});
    CHECK(text(b.get("y")) == "later");
    later.get();
  }

  TEST_CASE("store: a get or wait that outlives its timeout names the store and the key") {
    StoreServer server("127.0.0.1", 0);
    TcpStore s("127.0.0.1", server.port(), 300ms);
    const auto t0 = Clock::now();
    const std::string e = error_of([&] { s.get("never"); });
    CHECK(Clock::now() - t0 >= 250ms);
    CHECK(Clock::now() - t0 < 5s);
    CHECK(e.find("127.0.0.1:" + std::to_string(server.port())) != std::string::npos);
    CHECK(e.find("'never'") != std::string::npos);
    CHECK(e.find("timed out after 300 ms") != std::string::npos);

    CHECK(error_of([&] { s.wait({"a", "b"}, 100ms); }).find("'a', 'b'") != std::string::npos);
    // The connection is still good after a timeout.
    s.set("a", bytes("1"));
    CHECK(text(s.get("a")) == "1");
  }

  TEST_CASE("store: no server at the address: the call ends at its timeout, naming the address") {
    uint16_t port = 0;
    {
      StoreServer gone("127.0.0.1", 0);
      port = gone.port();
    }
    TcpStore s("127.0.0.1", port, 300ms);
    const auto t0 = Clock::now();
    const std::string e = error_of([&] { s.set("k", bytes("v")); });
    CHECK(Clock::now() - t0 < 5s);
    CHECK(e.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
    CHECK(e.find("cannot connect within 300 ms") != std::string::npos);
  }

  TEST_CASE("store: a client started before its server connects once the server listens") {
    uint16_t port = 0;
    {
      StoreServer probe("127.0.0.1", 0);
      port = probe.port();
    }
    TcpStore s("127.0.0.1", port, 10s);
    auto server = std::async(std::launch::async, [&] {
      std::this_thread::sleep_for(200ms);
      return std::make_unique<StoreServer>("127.0.0.1", port);
    });
    s.set("k", bytes("v"));
    CHECK(text(s.get("k")) == "v");
    server.get().reset();
  }

  TEST_CASE("store: a server that goes away ends a waiting get at once, not at its timeout") {
    auto server = std::make_unique<StoreServer>("127.0.0.1", 0);
    const std::string where = "127.0.0.1:" + std::to_string(server->port());
    TcpStore s("127.0.0.1", server->port(), 60s);
    s.set("k", bytes("v"));
    auto waiting = std::async(std::launch::async, [&] { return error_of([&] { s.get("missing"); }); });
    std::this_thread::sleep_for(200ms);
    const auto t0 = Clock::now();
    server.reset();
    REQUIRE(waiting.wait_for(10s) == std::future_status::ready);
    CHECK(Clock::now() - t0 < 10s);
    const std::string e = waiting.get();
    CHECK(e.find(where) != std::string::npos);
    CHECK(e.find("'missing'") != std::string::npos);
    CHECK(e.find("connection lost") != std::string::npos);
    // Later calls fail at once with the same cause.
    CHECK(error_of([&] { s.get("k"); }).find("connection lost") != std::string::npos);
  }

  TEST_CASE("store: interrupt ends a waiting get from another thread, and every later call") {
    StoreServer server("127.0.0.1", 0);
    TcpStore s("127.0.0.1", server.port(), 60s);
    auto waiting = std::async(std::launch::async, [&] { return error_of([&] { s.wait({"never"}); }); });
    std::this_thread::sleep_for(200ms);
    const auto t0 = Clock::now();
    s.interrupt("shutting down");
    REQUIRE(waiting.wait_for(10s) == std::future_status::ready);
    CHECK(Clock::now() - t0 < 5s);
    CHECK(waiting.get().find("interrupted: shutting down") != std::string::npos);
    CHECK(error_of([&] { s.set("k", {}); }).find("interrupted: shutting down") != std::string::npos);
  }

  TEST_CASE("store: garbage on the wire closes that connection only; the server serves on") {
    StoreServer server("127.0.0.1", 0);
    namespace asio = boost::asio;
    asio::io_context io;
    asio::ip::tcp::socket raw(io);
    raw.connect({asio::ip::make_address("127.0.0.1"), server.port()});
    const std::string junk = "\xff\xff\xff\xffGET / HTTP/1.1\r\n\r\n";  // a 4 GiB frame length
    asio::write(raw, asio::buffer(junk));
    asio::ip::tcp::socket raw2(io);
    raw2.connect({asio::ip::make_address("127.0.0.1"), server.port()});
    const char bad_op[] = {0, 0, 0, 13, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};  // op 9
    asio::write(raw2, asio::buffer(bad_op, sizeof bad_op));
    char reply[5] = {};
    asio::read(raw2, asio::buffer(reply));
    CHECK(reply[4] == 2);  // bad request

    TcpStore s("127.0.0.1", server.port(), 10s);
    s.set("k", bytes("v"));
    CHECK(text(s.get("k")) == "v");
  }

  TEST_CASE("store: a server cannot listen on an address that is not this host's") {
    CHECK_THROWS_WITH_AS(StoreServer("192.0.2.1", 0), doctest::Contains("192.0.2.1:0"), std::runtime_error);
  }
}
