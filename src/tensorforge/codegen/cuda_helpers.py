"""C++ helpers the CUDA backend adds to a kernel's source where its expressions call them
(cuda_expr.ExprPrinter.helpers names them): Python's floor division and modulo, and max / min
that propagate NaN."""

FLOOR_HELPERS = """\
// floor division and modulo with Python semantics (the IR's FloorDiv / FloorMod on integers);
// the minimum divided by -1 wraps, as in torch (INT_MIN // -1 == INT_MIN, INT_MIN % -1 == 0),
// where C's a / b overflows (undefined)
template <typename T> __device__ __forceinline__ T tf_floordiv(T a, T b) {
  if (b == T(-1)) return T(0ull - (unsigned long long)a);
  T q = a / b;
  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
template <typename T> __device__ __forceinline__ T tf_floormod(T a, T b) {
  if (b == T(-1)) return T(0);
  T r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
__device__ __forceinline__ float tf_float_floormod(float a, float b) {
  float r = fmodf(a, b);
  return (r != 0.f && ((r < 0.f) != (b < 0.f))) ? r + b : r;
}
__device__ __forceinline__ double tf_float_floormod(double a, double b) {
  double r = fmod(a, b);
  return (r != 0.0 && ((r < 0.0) != (b < 0.0))) ? r + b : r;
}
"""

MINMAX_NAN_HELPERS = """\
// max / min with NaN propagated (sm_80+: one max.NaN instruction; float64 has none)
__device__ __forceinline__ float tf_max_nan(float a, float b) {
#if __CUDA_ARCH__ >= 800
  float r; asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r;
#else
  return (a != a || b != b) ? a + b : fmaxf(a, b);
#endif
}
__device__ __forceinline__ float tf_min_nan(float a, float b) {
#if __CUDA_ARCH__ >= 800
  float r; asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r;
#else
  return (a != a || b != b) ? a + b : fminf(a, b);
#endif
}
__device__ __forceinline__ double tf_max_nan(double a, double b) {
  return (a != a || b != b) ? a + b : fmax(a, b);
}
__device__ __forceinline__ double tf_min_nan(double a, double b) {
  return (a != a || b != b) ? a + b : fmin(a, b);
}
"""
