#include "daemon/http_responder.hpp"

#include <exception>

#include <spdlog/spdlog.h>

namespace inferd::daemon {

void Exchange::deliver(ResponderCall call) {
  std::shared_lock lock(gate_->mu);
  if (!gate_->open) return;
  if (auto host = host_.lock()) host->post(shared_from_this(), std::move(call));
}

void Exchange::on_disconnect(std::function<void()> callback) {
  {
    std::lock_guard lock(mu_);
    if (!disconnected_) {
      if (!closed_) on_disconnect_.push_back(std::move(callback));
      return;
    }
  }
  callback();
}

void Exchange::disconnect() {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard lock(mu_);
    const bool first = !disconnected_ && !closed_;
    closed_ = true;
    if (!first) return;
    disconnected_ = true;
    callbacks.swap(on_disconnect_);
  }
  for (auto& callback : callbacks) {
    try {
      callback();
    } catch (const std::exception& e) {
      spdlog::warn("http: on_disconnect callback threw: {}", e.what());
    }
  }
}

void Exchange::finish() {
  std::lock_guard lock(mu_);
  closed_ = true;
  on_disconnect_.clear();
}

namespace {

using Kind = ResponderCall::Kind;

class ExchangeResponder final : public Responder {
 public:
  explicit ExchangeResponder(std::shared_ptr<Exchange> exchange) : exchange_(std::move(exchange)) {}
  ~ExchangeResponder() override { call({Kind::Abandon}); }

  void send(Response response) override { call({Kind::Send, std::move(response)}); }
  void start_stream(Response head) override { call({Kind::StartStream, std::move(head)}); }
  void write(std::string chunk) override { call({Kind::Write, {}, std::move(chunk)}); }
  void end() override { call({Kind::End}); }
  bool closed() const override { return exchange_->closed(); }
  void on_disconnect(std::function<void()> callback) override { exchange_->on_disconnect(std::move(callback)); }

 private:
  void call(ResponderCall c) {
    if (!exchange_->closed()) exchange_->deliver(std::move(c));
  }

  std::shared_ptr<Exchange> exchange_;
};

}  // namespace

std::shared_ptr<Responder> make_responder(std::shared_ptr<Exchange> exchange) {
  return std::make_shared<ExchangeResponder>(std::move(exchange));
}

}  // namespace inferd::daemon
