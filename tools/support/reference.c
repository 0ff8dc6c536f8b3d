/* CPU reference: see reference.h. */
#include "reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

float weave_bf16_to_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t weave_float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float weave_fp16_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float f;
  if (exp == 0) {
    f = ldexpf((float)man, -24);
    return sign ? -f : f;
  }
  if (exp == 31) {
    uint32_t u = sign | 0x7f800000u | (man << 13);
    memcpy(&f, &u, 4);
    return f;
  }
  uint32_t u = sign | ((exp + 112) << 23) | (man << 13);
  memcpy(&f, &u, 4);
  return f;
}

uint16_t weave_float_to_fp16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00;  /* NaN */
  if (a >= 0x477ff000u) return sign | 0x7c00; /* rounds to >= 65520: inf */
  if (a < 0x38800000u) {                      /* subnormal or zero in fp16: round |f| * 2^24 to an integer */
    float m = fabsf(f) * 16777216.0f;
    return sign | (uint16_t)lrintf(m); /* lrint rounds to nearest even */
  }
  uint32_t exp = (a >> 23) - 112, man = a & 0x7fffffu;
  uint32_t h = (exp << 10) | (man >> 13);
  uint32_t rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
  return sign | (uint16_t)h;
}

float weave_fp8_e4m3_to_float(uint8_t v) {
  const int sign = v >> 7, e = (v >> 3) & 15, m = v & 7;
  float f;
  if (e == 15 && m == 7) return sign ? -NAN : NAN;
  if (e == 0)
    f = ldexpf((float)m, -9); /* subnormal: m/8 * 2^-6 */
  else
    f = ldexpf((float)(8 + m), e - 10); /* (1 + m/8) * 2^(e-7) */
  return sign ? -f : f;
}

uint8_t weave_float_to_fp8_e4m3(float f) {
  if (isnan(f)) return 0x7f;
  const uint8_t sign = signbit(f) ? 0x80 : 0;
  const double a = fabs((double)f);
  if (a >= 448.0) return sign | 0x7e; /* saturate (448 itself is 0x7e) */
  if (a < ldexp(1.0, -6)) {
    /* subnormal range: multiples of 2^-9; nearbyint rounds to even (default rounding mode); 8 is the
     * smallest normal, code 0x08 */
    return sign | (uint8_t)nearbyint(a * 512.0);
  }
  int E;
  frexp(a, &E); /* a = f * 2^E, f in [0.5, 1): exponent of a is E - 1 */
  int e = E - 1;
  int q = (int)nearbyint((ldexp(a, -e) - 1.0) * 8.0); /* mantissa 0..8 */
  if (q == 8) {
    q = 0;
    ++e;
  }
  const int be = e + 7;
  if (be > 15 || (be == 15 && q == 7)) return sign | 0x7e; /* rounds past 448: saturate */
  return sign | (uint8_t)(be << 3) | (uint8_t)q;
}

double weave_host_get(weave_dtype_t t, const void *p, size_t i) {
  switch (t) {
    case WEAVE_BF16: return weave_bf16_to_float(((const uint16_t *)p)[i]);
    case WEAVE_FP16: return weave_fp16_to_float(((const uint16_t *)p)[i]);
    case WEAVE_FP32: return ((const float *)p)[i];
    case WEAVE_FP8_E4M3: return weave_fp8_e4m3_to_float(((const uint8_t *)p)[i]);
    case WEAVE_DTYPE_AUTO: break;
  }
  return NAN;
}

void weave_host_set(weave_dtype_t t, void *p, size_t i, double v) {
  switch (t) {
    case WEAVE_BF16: ((uint16_t *)p)[i] = weave_float_to_bf16((float)v); break;
    case WEAVE_FP16: ((uint16_t *)p)[i] = weave_float_to_fp16((float)v); break;
    case WEAVE_FP32: ((float *)p)[i] = (float)v; break;
    case WEAVE_FP8_E4M3: ((uint8_t *)p)[i] = weave_float_to_fp8_e4m3((float)v); break;
    case WEAVE_DTYPE_AUTO: break;
  }
}

static double b_at(weave_dtype_t t, weave_layout_t l, const void *B, int N, int K, int k, int n) {
  return weave_host_get(t, B, l == WEAVE_LAYOUT_ROW ? (size_t)k * N + n : (size_t)n * K + k);
}

void weave_ref_gemm_rs(int M, int N, int K, int world, weave_dtype_t t, weave_layout_t b_layout, double alpha,
                       const void *const *A, const void *const *B, const void *bias, int row_begin, int rows,
                       double *out) {
  (void)M;
  /* i-k-j order over a converted row of B: streams B once per row of A. */
  double *brow = (double *)malloc(sizeof(double) * (size_t)N);
  memset(out, 0, sizeof(double) * (size_t)rows * N);
  for (int r = 0; r < world; ++r)
    for (int k = 0; k < K; ++k) {
      for (int n = 0; n < N; ++n) brow[n] = b_at(t, b_layout, B[r], N, K, k, n);
      for (int i = 0; i < rows; ++i) {
        double a = weave_host_get(t, A[r], (size_t)(row_begin + i) * K + k);
        if (a == 0.0) continue;
        double *o = out + (size_t)i * N;
        for (int n = 0; n < N; ++n) o[n] += a * brow[n];
      }
    }
  for (int i = 0; i < rows; ++i)
    for (int n = 0; n < N; ++n) {
      double v = alpha * out[(size_t)i * N + n];
      if (bias) v += weave_host_get(t, bias, (size_t)n);
      out[(size_t)i * N + n] = v;
    }
  free(brow);
}

void weave_ref_gemm_rs_naive(int M, int N, int K, int world, weave_dtype_t t, weave_layout_t b_layout, double alpha,
                             const void *const *A, const void *const *B, const void *bias, int row_begin, int rows,
                             double *out) {
  (void)M;
  for (int i = 0; i < rows; ++i)
    for (int n = 0; n < N; ++n) {
      double s = 0;
      for (int r = 0; r < world; ++r)
        for (int k = 0; k < K; ++k)
          s += weave_host_get(t, A[r], (size_t)(row_begin + i) * K + k) * b_at(t, b_layout, B[r], N, K, k, n);
      out[(size_t)i * N + n] = alpha * s + (bias ? weave_host_get(t, bias, (size_t)n) : 0.0);
    }
}

/* One k32 step's ulp (reference.h): 2^-13 of the largest magnitude the step's adder aligns to. */
static double fp8_step_ulp(double d0, double d1, double pmax) {
  double m = fabs(d0) > fabs(d1) ? fabs(d0) : fabs(d1);
  return ldexp(m > pmax ? m : pmax, -13);
}

void weave_ref_gemm_rs_scaled(int M, int N, int K, int world, weave_dtype_t in_t, weave_dtype_t out_t,
                              weave_layout_t b_layout, double alpha, weave_scale_mode_t mode, int flags,
                              const float *const *sa, const float *const *sb, const void *const *A,
                              const void *const *B, const void *bias, int row_begin, int rows, double *out,
                              double *bound) {
  (void)M;
  const int fast_accum = (flags & WEAVE_REF_FP8_FAST) != 0, random_signs = (flags & WEAVE_REF_FP8_RANDOM_SIGNS) != 0;
  const size_t n_out = (size_t)rows * N, n_alloc = n_out ? n_out : 1;
  double *brow = (double *)malloc(sizeof(double) * (size_t)N);
  double *acc = (double *)malloc(sizeof(double) * n_alloc);   /* P(k) */
  double *mx = (double *)malloc(sizeof(double) * n_alloc);    /* max |P(k)| at k32 boundaries */
  double *base = (double *)malloc(sizeof(double) * n_alloc);  /* P where the tensor cores' sum started */
  double *prev = (double *)malloc(sizeof(double) * n_alloc);  /* that sum at the previous k32 boundary */
  double *pm = (double *)malloc(sizeof(double) * n_alloc);    /* max |product| in the current k32 step */
  double *steps = (double *)malloc(sizeof(double) * n_alloc); /* sum of the steps' terms (random signs: of
                                                                * their variances) */
  const int chunk = fast_accum ? K : WEAVE_REF_FP8_CHUNK;
  memset(out, 0, sizeof(double) * n_out);
  if (bound) memset(bound, 0, sizeof(double) * n_out);
  for (int r = 0; r < world; ++r) {
    /* rank r's unscaled dot products, i-k-j over a converted row of B, with the bound's terms at k32
     * boundaries */
    memset(acc, 0, sizeof(double) * n_out);
    memset(mx, 0, sizeof(double) * n_out);
    memset(base, 0, sizeof(double) * n_out);
    memset(prev, 0, sizeof(double) * n_out);
    memset(pm, 0, sizeof(double) * n_out);
    memset(steps, 0, sizeof(double) * n_out);
    for (int k = 0; k < K; ++k) {
      for (int n = 0; n < N; ++n) brow[n] = b_at(in_t, b_layout, B[r], N, K, k, n);
      const int edge = (k + 1) % 32 == 0 || (k + 1) % chunk == 0 || k == K - 1;
      const int chunk_end = (k + 1) % chunk == 0 || k == K - 1;
      for (int i = 0; i < rows; ++i) {
        double a = weave_host_get(in_t, A[r], (size_t)(row_begin + i) * K + k);
        double *o = acc + (size_t)i * N;
        if (a != 0.0) {
          if (bound) {
            double *p = pm + (size_t)i * N;
            for (int n = 0; n < N; ++n) {
              const double t = a * brow[n];
              o[n] += t;
              p[n] = fabs(t) > p[n] ? fabs(t) : p[n];
            }
          } else {
            for (int n = 0; n < N; ++n) o[n] += a * brow[n];
          }
        }
        if (edge && bound) {
          double *m = mx + (size_t)i * N, *b0 = base + (size_t)i * N, *pv = prev + (size_t)i * N;
          double *p = pm + (size_t)i * N, *st = steps + (size_t)i * N;
          for (int n = 0; n < N; ++n) {
            m[n] = fabs(o[n]) > m[n] ? fabs(o[n]) : m[n];
            /* fast: the sum from k = 0, or from a stream-K segment's start (|d| <= 2 max |P|: twice
             * the term); fp32: from the chunk's start */
            const double d = o[n] - b0[n];
            const double u = (fast_accum ? 2.0 : 1.0) * fp8_step_ulp(pv[n], d, p[n]);
            st[n] += random_signs ? 34.0 / 3.0 * u * u : 34.0 * u;
            pv[n] = d;
            p[n] = 0;
            if (chunk_end && !fast_accum) {
              b0[n] = o[n];
              pv[n] = 0;
            }
          }
        }
      }
    }
    for (int i = 0; i < rows; ++i)
      for (int n = 0; n < N; ++n) {
        double s = alpha;
        if (mode == WEAVE_SCALE_TENSOR)
          s *= (double)sa[r][0] * (double)sb[r][0];
        else if (mode == WEAVE_SCALE_ROW)
          s *= (double)sa[r][row_begin + i] * (double)sb[r][n];
        const size_t at = (size_t)i * N + n;
        out[at] += s * acc[at];
        if (bound)
          bound[at] += fabs(s) * ((random_signs ? 8.0 * sqrt(steps[at]) : steps[at]) +
                                  (fast_accum ? 0.0 : 2.0 * ((K + chunk - 1) / chunk) * ldexp(mx[at], -23)));
      }
  }
  if (bias)
    for (int i = 0; i < rows; ++i)
      for (int n = 0; n < N; ++n) out[(size_t)i * N + n] += weave_host_get(out_t, bias, (size_t)n);
  free(brow);
  free(acc);
  free(mx);
  free(base);
  free(prev);
  free(pm);
  free(steps);
}

void weave_check_result(weave_dtype_t t, const void *got, const double *ref, size_t n, double atol, double rtol,
                        weave_check_t *out) {
  weave_check_result_ex(t, got, ref, NULL, n, atol, rtol, out);
}

void weave_check_result_ex(weave_dtype_t t, const void *got, const double *ref, const double *extra, size_t n,
                           double atol, double rtol, weave_check_t *out) {
  memset(out, 0, sizeof(*out));
  out->first_bad = (size_t)-1;
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    double g = weave_host_get(t, got, i), r = ref[i];
    int bad = 0;
    if (!isfinite(g)) {
      out->nonfinite++;
      bad = 1;
    } else {
      double d = fabs(g - r);
      if (d > out->max_abs_err) out->max_abs_err = d;
      if (d > atol + rtol * fabs(r) + (extra ? extra[i] : 0.0)) bad = 1;
      num += d * d;
    }
    den += r * r;
    if (bad) {
      if (out->first_bad == (size_t)-1) out->first_bad = i;
      out->wrong++;
    }
  }
  out->rel_err = out->nonfinite ? INFINITY : (den > 0 ? sqrt(num / den) : sqrt(num));
}

void weave_tolerance(weave_dtype_t t, int K_total, double *atol, double *rtol) {
  /* Inputs are exact in the reference; error = rounding of the output (2^-8 bf16, 2^-11 fp16) and of
   * partials, which grow like sqrt(K) for random signs (values in [-1, 1) give |C| ~ sqrt(K/3)), plus
   * the fp32 accumulation's own: each of K additions rounds a running sum of size ~sqrt(k/9) by up to
   * 2^-24 of it, which adds up to 2^-24 K / 7.3 (root mean square) and so grows like K; K 2^-24 holds
   * it with a margin of 7 (it matters for fp32 outputs alone: sequential fp32 sums over K 7680 broke
   * the sqrt(K) term alone 14 times in 100,000 sums). */
  double scale = sqrt((double)K_total / 3.0 + 1.0);
  double eps = t == WEAVE_BF16 ? 1.0 / 256 : t == WEAVE_FP16 ? 1.0 / 2048 : 1.0 / (1 << 20);
  *rtol = 2.0 * eps;
  *atol = 4.0 * eps * scale + ldexp((double)K_total, -24);
}

void weave_tolerance_scaled(weave_dtype_t t, int K_total, double gain, double *atol, double *rtol) {
  weave_tolerance(t, K_total, atol, rtol);
  *atol *= fmax(fabs(gain), 1.0);
}

int weave_sample_rows(int rows, int begins[3]) {
  const int n = rows < 4 ? rows : 4;
  begins[0] = 0;
  begins[1] = rows / 2 > rows - n ? rows - n : rows / 2;
  begins[2] = rows - n;
  return n;
}

size_t weave_check_sampled_rows(int M, int N, int K, int world, weave_dtype_t t, weave_layout_t b_layout, double alpha,
                                const void *const *A, const void *const *B, const void *bias, int row_begin, int rows,
                                const void *got, weave_check_t res[3]) {
  int begins[3];
  const int n = weave_sample_rows(rows, begins);
  double atol, rtol;
  weave_tolerance_scaled(t, K * world, alpha, &atol, &rtol);
  double *ref = (double *)malloc(sizeof(double) * 4 * (size_t)N + 1);
  size_t wrong = 0;
  for (int i = 0; i < 3; ++i) {
    memset(&res[i], 0, sizeof(res[i]));
    res[i].first_bad = (size_t)-1;
    if (n == 0 || !ref) continue;
    weave_ref_gemm_rs(M, N, K, world, t, b_layout, alpha, A, B, bias, row_begin + begins[i], n, ref);
    weave_check_result(t, (const char *)got + (size_t)begins[i] * N * weave_dtype_size(t), ref, (size_t)n * N, atol,
                       rtol, &res[i]);
    wrong += res[i].wrong;
  }
  free(ref);
  return wrong;
}

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void weave_fill_random(weave_dtype_t t, void *p, size_t n, uint64_t seed) {
  uint64_t s = seed;
  for (size_t i = 0; i < n; ++i) {
    double v = (double)(splitmix64(&s) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0;
    weave_host_set(t, p, i, v);
  }
}
