// Learned rotations (tools/quant/train_spinquant.py): rotations.json says the sizes and where
// the float64 matrices are in its data file (row-major R1 [hidden, hidden], then one R2
// [head_dim, head_dim] per layer).
#pragma once

#include <string>
#include <vector>

namespace spinquant {

struct LearnedRotations {
  std::string path;  // the json, for messages
  int64_t hidden = 0, head_dim = 0;
  std::vector<double> r1;               // hidden x hidden
  std::vector<std::vector<double>> r2;  // per layer, head_dim x head_dim
};

// Reads and checks the file pair: format, version, dtype, the data file's byte size, and that
// every matrix is orthogonal (|R R^T - I| < 1e-6); each failure is one error naming the file.
LearnedRotations load_rotations(const std::string& json_path);

}  // namespace spinquant
