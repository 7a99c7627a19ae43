#include "fabric/verbs.hpp"

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "inferd_config.h"

#if INFERD_HAVE_RDMA
#include <infiniband/verbs.h>
#endif

namespace inferd::fabric {

#if INFERD_HAVE_RDMA
VerbsReport probe_verbs() {
  VerbsReport r;
  r.built = true;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) {
    // ENOSYS: the kernel has no RDMA support at all, which is no devices too.
    if (errno != ENOSYS) r.error = fmt::format("ibv_get_device_list: {}", std::strerror(errno));
    return r;
  }
  for (int i = 0; i < n; ++i) {
    const std::string name = ibv_get_device_name(list[i]);
    ibv_context* ctx = ibv_open_device(list[i]);
    if (ctx == nullptr) {
      r.error = fmt::format("{}: ibv_open_device: {}", name, std::strerror(errno));
      continue;
    }
    ibv_device_attr dev{};
    if (int rc = ibv_query_device(ctx, &dev); rc != 0) {
      r.error = fmt::format("{}: ibv_query_device: {}", name, std::strerror(rc));
    } else {
      for (int p = 1; p <= dev.phys_port_cnt; ++p) {
        ibv_port_attr a{};
        if (int rc = ibv_query_port(ctx, static_cast<uint8_t>(p), &a); rc != 0) {
          r.error = fmt::format("{} port {}: ibv_query_port: {}", name, p, std::strerror(rc));
          continue;
        }
        r.ports.push_back({name, p, static_cast<int>(a.state), 128 << static_cast<int>(a.active_mtu),
                           a.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand", a.active_speed,
                           a.active_width});
      }
    }
    ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  return r;
}
#else
VerbsReport probe_verbs() { return {}; }
#endif

void merge_verbs(FabricTable& table, const VerbsReport& report) {
  for (const VerbsPort& v : report.ports) {
    for (Port& p : table.ports) {
      if (p.device != v.device || p.port != v.port) continue;
      p.active_mtu = v.active_mtu;
    }
  }
}

}  // namespace inferd::fabric
