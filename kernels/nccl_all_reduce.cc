#include "kernels/nccl_all_reduce.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace hearth::kernels {

NcclAllReduce::NcclAllReduce(std::vector<int> devices) : devices_(std::move(devices)) {
  if (devices_.empty()) throw std::runtime_error("NCCL all-reduce over no GPUs");
  const nccl::Library& lib = nccl::library();
  comms_.assign(devices_.size(), nullptr);
  nccl::check(lib.comm_init_all(comms_.data(), int(devices_.size()), devices_.data()),
              "ncclCommInitAll");
}

NcclAllReduce::~NcclAllReduce() {
  for (nccl::CommHandle c : comms_)
    if (c) nccl::library().comm_destroy(c);
}

void NcclAllReduce::run(const std::vector<const float*>& send, const std::vector<float*>& recv,
                        int64_t count, const std::vector<cudaStream_t>& streams) {
  if (int(send.size()) != ranks() || int(recv.size()) != ranks() || int(streams.size()) != ranks())
    throw std::runtime_error("NCCL all-reduce needs one buffer and stream per rank");
  const nccl::Library& lib = nccl::library();
  nccl::check(lib.group_start(), "ncclGroupStart");
  nccl::Result first_error = nccl::kSuccess;
  for (int r = 0; r < ranks(); ++r) {
    const nccl::Result res =
        lib.all_reduce(send[size_t(r)], recv[size_t(r)], size_t(count), nccl::kFloat32, nccl::kSum,
                       comms_[size_t(r)], streams[size_t(r)]);
    if (res != nccl::kSuccess && first_error == nccl::kSuccess) first_error = res;
  }
  // The group is closed whatever happened, so NCCL is not left mid-group.
  const nccl::Result end = lib.group_end();
  nccl::check(first_error, "ncclAllReduce");
  nccl::check(end, "ncclGroupEnd");
}

}  // namespace hearth::kernels
