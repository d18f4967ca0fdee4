// Element-wise kernels with numpy broadcasting: arithmetic, comparison, logic, unary math,
// Where, Cast, Clip.
#pragma once

#include "npuforge/kernels/tensor.h"

#include <optional>

namespace nf::kernels {

enum class Binary { Add, Sub, Mul, Div, Pow, Max, Min, Mod, FMod, Equal, Less, LessOrEqual, Greater, GreaterOrEqual, And, Or, Xor };
enum class Unary { Neg, Abs, Sqrt, Reciprocal, Exp, Log, Cos, Sin, Tanh, Erf, Sigmoid, Relu, Not, Floor, Ceil, Sign, Softplus };

// Both inputs must have the same dtype (Pow casts its exponent first). Comparisons return bool.
Tensor binary(Binary op, const Tensor& a, const Tensor& b);
Tensor unary(Unary op, const Tensor& x);
// ONNX Gelu (opset 20): x * Phi(x) exactly (erf), or with the tanh approximation; floats only.
Tensor gelu(const Tensor& x, bool tanh_approximation);
Tensor where(const Tensor& cond, const Tensor& x, const Tensor& y);
// Conversion between numeric dtypes, float16 and bfloat16 included.
Tensor cast(const Tensor& x, nf_dtype to);
// Bounds are scalars of x's dtype (absent = unbounded).
Tensor clip(const Tensor& x, const Tensor* lo, const Tensor* hi);

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t h);

}  // namespace nf::kernels
