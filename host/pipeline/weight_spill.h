// Weights a stage makes (mha2sha's per-head slices, spinquant's rotated copies, ssd's grown
// embedding table) are anonymous memory, while the model's own weights are file mappings
// that leave the resident set once read. A build moves each new weight into one unnamed
// scratch file and maps it back, so new weights cost the build disk space, not memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>

#include "ir/ir.h"

namespace nf::host {

struct ScratchFile;

class WeightSpill {
 public:
  static constexpr size_t kMinBytes = size_t{256} << 10;  // smaller weights stay in memory

  // An unnamed file (O_TMPFILE: nothing to clean up, even after a crash) in the nearest
  // existing folder at or above `near`. Without one, spill() moves nothing. The file stops
  // growing where its file system would keep less than `keep_free` bytes free (the packages
  // the build writes there at its end); later weights stay in memory.
  explicit WeightSpill(const std::filesystem::path& near, uint64_t keep_free = 0);
  ~WeightSpill();
  WeightSpill(const WeightSpill&) = delete;
  WeightSpill& operator=(const WeightSpill&) = delete;

  // Moves every owned initializer buffer of at least min_bytes into the file and maps it
  // back in place: same bytes, same TensorRefs, buffers shared between graphs stay shared.
  // A write that fails (disk full) stops the spilling and leaves that weight in memory.
  // Returns the bytes moved. Call it between stages, when no plugin holds a data pointer.
  uint64_t spill(ir::ModelSet& ms, size_t min_bytes = kMinBytes);
  // The same for one weight, as the last plugin reference to it goes (while a stage runs,
  // so a stage making a new copy of every weight never holds them all). Thread-safe.
  uint64_t spill(ir::TensorRef& weight, size_t min_bytes = kMinBytes);
  bool active() const;

 private:
  std::shared_ptr<ScratchFile> file_;
  std::mutex mutex_;
};

// Sends every weight a plugin installs and lets go to `spill` while it lives.
class SpillReleasedWeights {
 public:
  explicit SpillReleasedWeights(WeightSpill& spill);
  ~SpillReleasedWeights();
  SpillReleasedWeights(const SpillReleasedWeights&) = delete;
  SpillReleasedWeights& operator=(const SpillReleasedWeights&) = delete;
};

}  // namespace nf::host
