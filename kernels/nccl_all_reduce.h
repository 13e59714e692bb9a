// NcclAllReduce: NCCL's all-reduce over the GPUs of one process, the alternative to
// PeerAllReduce (issue 26): one communicator per device from ncclCommInitAll, destroyed with this
// object. NCCL's sum order depends on its algorithm and the rank count, so its bits equal the
// fixed-order sum only where addition order cannot matter (two ranks); see all_reduce_nccl_test.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/nccl_library.h"

namespace hearth::kernels {

class NcclAllReduce {
 public:
  // Throws naming the cause when NCCL cannot be loaded or a communicator cannot be made.
  explicit NcclAllReduce(std::vector<int> devices);
  NcclAllReduce(const NcclAllReduce&) = delete;
  NcclAllReduce& operator=(const NcclAllReduce&) = delete;
  ~NcclAllReduce();

  int ranks() const { return int(devices_.size()); }
  int device(int rank) const { return devices_[size_t(rank)]; }

  // One all-reduce (sum, fp32) on every rank at once: send[r] -> recv[r] on streams[r]. NCCL
  // needs every rank's call inside one group when one thread drives them all.
  void run(const std::vector<const float*>& send, const std::vector<float*>& recv, int64_t count,
           const std::vector<cudaStream_t>& streams);

 private:
  std::vector<int> devices_;
  std::vector<nccl::CommHandle> comms_;
};

}  // namespace hearth::kernels
