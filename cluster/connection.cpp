#include "cluster/connection.hpp"

#include <fmt/format.h>

#include <utility>

#include "cluster/messages.hpp"

namespace inferd::cluster {

namespace asio = boost::asio;
namespace json = boost::json;

Connection::Connection(asio::ip::tcp::socket socket) : socket_(std::move(socket)) {
  boost::system::error_code ec;
  const auto r = socket_.remote_endpoint(ec);
  if (!ec) {
    peer_ip_ = r.address().to_string();
    peer_ = fmt::format("{}:{}", peer_ip_, r.port());
  }
  const auto l = socket_.local_endpoint(ec);
  if (!ec) local_ = l.address().to_string();
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);  // plans are small and latency-bound
}

void Connection::start(OnMessage on_message, OnClose on_close) {
  on_message_ = std::move(on_message);
  on_close_ = std::move(on_close);
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->read_header(); });
}

void Connection::read_header() {
  asio::async_read(socket_, asio::buffer(header_), [self = shared_from_this()](auto ec, size_t) {
    if (ec) return self->closed(ec == asio::error::eof ? "the peer closed the connection" : ec.message());
    const uint32_t n = (uint32_t(self->header_[0]) << 24) | (uint32_t(self->header_[1]) << 16) |
                       (uint32_t(self->header_[2]) << 8) | uint32_t(self->header_[3]);
    if (n == 0 || n > kMaxFrameBytes) return self->closed(fmt::format("a frame of {} bytes", n));
    self->read_body(n);
  });
}

void Connection::read_body(uint32_t n) {
  body_.resize(n);
  asio::async_read(socket_, asio::buffer(body_), [self = shared_from_this()](auto ec, size_t) {
    if (ec) return self->closed(ec.message());
    boost::system::error_code perr;
    json::value v = json::parse(self->body_, perr);
    if (perr || !v.is_object()) return self->closed("a frame that is not a JSON object");
    if (self->on_message_) self->on_message_(self, std::move(v.as_object()));
    if (!self->closed_) self->read_header();
  });
}

void Connection::send(const json::object& message) {
  std::string body = json::serialize(message);
  std::string frame(4, '\0');
  const auto n = static_cast<uint32_t>(body.size());
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((n >> (24 - 8 * i)) & 0xff);
  frame += body;
  asio::post(socket_.get_executor(), [self = shared_from_this(), frame = std::move(frame)]() mutable {
    if (self->closed_) return;
    self->out_.push_back(std::move(frame));
    if (self->out_.size() == 1) self->write_next();
  });
}

void Connection::write_next() {
  asio::async_write(socket_, asio::buffer(out_.front()), [self = shared_from_this()](auto ec, size_t) {
    if (ec) return self->closed(ec.message());
    self->out_.pop_front();
    if (!self->out_.empty()) self->write_next();
  });
}

void Connection::close() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->closed("closed"); });
}

void Connection::closed(const std::string& why) {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ec;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  out_.clear();
  on_message_ = nullptr;
  if (auto on_close = std::exchange(on_close_, nullptr)) on_close(shared_from_this(), why);
}

}  // namespace inferd::cluster
