#include "engine/mapped_bytes.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace inferd::engine {
namespace {

[[noreturn]] void fail(const char* what, int err) { throw std::runtime_error(std::string(what) + std::strerror(err)); }

}  // namespace

MappedBytes map_file_readonly(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open: ", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("cannot stat: ", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error("not a regular file");
  }
  MappedBytes m;
  m.size = static_cast<size_t>(st.st_size);
  if (m.size > 0) {
    void* p = ::mmap(nullptr, m.size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail("cannot map: ", err);
    }
    m.mapping = p;
    m.base = static_cast<const uint8_t*>(p);
    // Weights are read soon after; start the readahead now.
    ::madvise(p, m.size, MADV_WILLNEED);
  }
  ::close(fd);
  return m;
}

MappedBytes map_copy_readonly(std::span<const uint8_t> bytes) {
  MappedBytes m;
  m.size = bytes.size();
  if (bytes.empty()) return m;
  void* p = ::mmap(nullptr, bytes.size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail("cannot allocate: ", errno);
  std::memcpy(p, bytes.data(), bytes.size());
  ::mprotect(p, bytes.size(), PROT_READ);
  m.mapping = p;
  m.base = static_cast<const uint8_t*>(p);
  return m;
}

void unmap(const MappedBytes& m) {
  if (m.mapping) ::munmap(m.mapping, m.size);
}

}  // namespace inferd::engine
