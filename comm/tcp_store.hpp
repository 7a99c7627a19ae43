// The rendezvous store of a tensor-parallel group: a small key-value server
// that one process runs (the head, on its master address) and a client that
// every rank uses to publish and find what the group needs to connect (Gloo's
// pair addresses, NCCL's unique id). Callers put their keys under a prefix per
// generation (gloo::rendezvous::PrefixStore), so a re-formed group never reads
// the keys of the one before.
//
// Nothing here waits for ever: a get or wait that outlives its timeout, a
// server that cannot be reached or goes away, and interrupt() all end the call
// with a CollectiveError naming the store's address and the key.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

namespace inferd::comm {

// Serves set/get/wait to any number of clients on its own thread, until
// destroyed. Keys live as long as the server.
class StoreServer {
 public:
  // Listens on host:port (a numeric address or a name; port 0 picks a free
  // one, see port()). Throws std::runtime_error naming the address when it
  // cannot listen.
  StoreServer(const std::string& host, uint16_t port);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  uint16_t port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One connection to a StoreServer. One thread calls set/get/wait at a time;
// interrupt() may come from any thread.
class TcpStore : public gloo::rendezvous::Store {
 public:
  // Connects, retrying until `timeout` (the server may start after the
  // client). `timeout` is also the default of get() and wait(keys).
  TcpStore(std::string host, uint16_t port, std::chrono::milliseconds timeout);
  ~TcpStore() override;

  void set(const std::string& key, const std::vector<char>& value) override;
  // Waits until the key exists (Gloo's stores do), at most the default timeout.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  // A timeout of zero (gloo::kNoTimeout) means the default: nothing here
  // waits for ever.
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  // The call in progress, and every later one, throws CollectiveError(why).
  void interrupt(const std::string& why);

  // "host:port", for messages.
  const std::string& address() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace inferd::comm
