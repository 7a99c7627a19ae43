// What a handler's Responder shares with the connection that answers it. A
// handler may keep its responder on any thread, after the connection or the whole
// server is gone, so the responder reaches its connection only through a weak
// pointer, and only while the server's gate is open.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "daemon/http_server.hpp"

namespace inferd::daemon {

// Open while the server's I/O threads run; stop() closes it, after which the
// io_context may go away while responders live on.
struct Gate {
  std::shared_mutex mu;
  bool open = true;
};

// One thing a responder asks of its connection.
struct ResponderCall {
  enum class Kind { Send, StartStream, Write, End, Abandon };
  Kind kind;
  Response response = {};  // Send, StartStream
  std::string chunk = {};  // Write
};

class Exchange;

// The connection's side: applies calls on its own strand, in the order posted,
// while `exchange` is still the one it is answering.
class ExchangeHost {
 public:
  virtual void post(std::shared_ptr<Exchange> exchange, ResponderCall call) = 0;

 protected:
  ~ExchangeHost() = default;
};

// One request, from the connection that read it to the responder that answers it.
class Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(std::shared_ptr<Gate> gate, std::weak_ptr<ExchangeHost> host)
      : gate_(std::move(gate)), host_(std::move(host)) {}

  // Hands `call` to the connection while it, and the server, are still there.
  void deliver(ResponderCall call);
  bool closed() const { return closed_.load(); }
  void on_disconnect(std::function<void()> callback);

  // The client went away, the request timed out or the server stopped: runs
  // the callbacks, once.
  void disconnect();
  // The response is finished: later output is dropped, callbacks never run.
  void finish();

 private:
  std::shared_ptr<Gate> gate_;
  std::weak_ptr<ExchangeHost> host_;
  std::atomic<bool> closed_{false};
  std::mutex mu_;  // guards the two below
  bool disconnected_ = false;
  std::vector<std::function<void()>> on_disconnect_;
};

std::shared_ptr<Responder> make_responder(std::shared_ptr<Exchange> exchange);

}  // namespace inferd::daemon
