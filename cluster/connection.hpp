// One control-plane connection: frames (messages.hpp) read in a loop and
// written from any thread, in order, on the socket's io_context.
#pragma once
#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace inferd::cluster {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // Both get the connection itself, so a callback need not hold it: a
  // callback that captured it would keep it alive forever.
  using OnMessage = std::function<void(const std::shared_ptr<Connection>&, boost::json::object)>;
  using OnClose = std::function<void(const std::shared_ptr<Connection>&, const std::string& why)>;

  explicit Connection(boost::asio::ip::tcp::socket socket);
  // Starts reading; on_message runs on the io_context's thread for each frame,
  // on_close once when the peer goes, a frame is malformed or close() is
  // called; after on_close both callbacks are dropped.
  void start(OnMessage on_message, OnClose on_close);
  // Thread-safe; frames leave in the order send() was called.
  void send(const boost::json::object& message);
  void close();
  std::string peer() const { return peer_; }
  std::string peer_address() const { return peer_ip_; }  // without the port
  std::string local_address() const { return local_; }

 private:
  void read_header();
  void read_body(uint32_t n);
  void write_next();
  void closed(const std::string& why);

  boost::asio::ip::tcp::socket socket_;
  std::string peer_, peer_ip_, local_;
  OnMessage on_message_;
  OnClose on_close_;
  unsigned char header_[4] = {};
  std::string body_;
  std::deque<std::string> out_;  // touched only on the io_context's thread
  bool closed_ = false;
};

}  // namespace inferd::cluster
