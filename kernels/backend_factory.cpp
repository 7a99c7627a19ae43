#include "kernels/backend_factory.hpp"

#include <charconv>
#include <optional>
#include <stdexcept>

#include "inferd_config.h"
#if INFERD_HAVE_CUDA
#include "kernels/cuda/cuda_backend.hpp"
#endif

namespace inferd::kernels {
std::optional<int> cuda_device_index(std::string_view device) {
  if (device == "cuda") return 0;
  if (!device.starts_with("cuda:")) return std::nullopt;
  const std::string_view n = device.substr(5);
  int id = -1;
  auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), id);
  if (ec != std::errc() || end != n.data() + n.size() || id < 0) return std::nullopt;
  return id;
}

std::string device_error(std::string_view device) {
  if (device == "cpu") return {};
  const bool cuda = cuda_device_index(device).has_value();
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "'" + std::string(...).
  std::string why(cuda ? "'" : "must be cpu, cuda or cuda:N, got '");
  why.append(device).append("'");
  if (!cuda) return why;
  if (!INFERD_HAVE_CUDA) return why.append(": this build has no CUDA backend (configure with -Dcuda=enabled)");
  return {};
}

std::unique_ptr<Backend> make_backend(std::string_view device, int threads) {
  if (std::string why = device_error(device); !why.empty()) throw std::invalid_argument(why);
  if (device == "cpu") return make_cpu_backend(threads);
#if INFERD_HAVE_CUDA
  return make_cuda_backend(*cuda_device_index(device));
#else
  throw std::logic_error("unreachable: CUDA device accepted without CUDA");
#endif
}

}  // namespace inferd::kernels
