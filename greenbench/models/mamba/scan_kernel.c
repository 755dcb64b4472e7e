/* Mamba-1's selective scan on CPU: forward and hand-written backward on raw float32 arrays.
 *
 * Why this file exists: the selective-scan kernels of mamba-ssm are CUDA only, and the torch
 * stepping scan in greenbench/models/scan.py (the reference and fallback) spends its time in
 * per-step operator dispatch, not arithmetic. This is the same recurrence and the same backward
 * as `_SelectiveScan` there, in plain C + OpenMP so it builds in about a second with the system
 * compiler (greenbench/models/scan_native.py compiles and loads it with ctypes).
 *
 * Shapes (all row-major, contiguous, float32), time-major as in scan.py:
 *   u, delta, y, gy, gu, gdelta: (T, Bsz, D)    At: (N, D), the transpose of A (D, N)
 *   Bm, Cm, gB, gC: (T, Bsz, N)                  gA: (D, N)
 *   starts: (ceil(T / chunk), Bsz, N, D), the state before every chunk of `chunk` steps.
 *
 *   h_t = exp(delta_t A) * h_{t-1} + delta_t u_t B_t        y_t = sum_n C_t[n] h_t[., n]
 *
 * Work is split into items (batch b, group of channels d0..d0+w). Within an item the time loop
 * is outermost and the channels innermost, so each step reads contiguous rows of u, delta, y
 * and the inner loops vectorise across channels; the (N, w) states stay in L1. The group width
 * depends only on D (not on the thread count), so results do not depend on the thread count.
 * Rows are padded to whole blocks of GB_LANES channels (fixed-trip inner loops), and the rows
 * of the next steps are prefetched (they are Bsz*D floats apart, out of the prefetchers' reach).
 * Race-free reductions: gB and gC (sums over D) are written per group into a partial buffer
 * and summed over groups afterwards; gA (sum over t and b) is accumulated per batch row into a
 * (Bsz, N, D) buffer and summed over b afterwards. No atomics.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef GB_GROUP
#define GB_GROUP 128 /* target channels per work item */
#endif
#ifndef GB_LANES
#define GB_LANES 16 /* channels per register block: one AVX-512 or two AVX2 registers */
#endif
#define GB_ALIGN 64
#ifndef GB_AHEAD
#define GB_AHEAD 2 /* steps to prefetch ahead */
#endif

/* exp(x) in float32, inlined so the channel loops vectorise without libm calls (glibc exposes
 * its vector expf to the compiler only under -ffast-math, which we do not use).
 * x = k ln2 + r with |r| <= ln2/2 (k by the 1.5*2^23 rounding trick, ln2 in two parts);
 * e^r by a degree-6 polynomial whose coefficients were fitted for this file (least squares
 * on relative error, reweighted towards minimax: max relative error 2e-8 on the interval,
 * below float32 rounding). The polynomial is scaled by 2 so that 2^(k-1), a normal float
 * for every clamped x, carries the exponent. Measured against a float64 exp on 2M points of
 * [-86.9, 88.72]: at most 1.3 ulp off (mean 0.28), as compiled for SSE2, AVX2 and AVX-512. Clamping keeps it branch-free: below -86.9 the
 * result is 1.8e-38 instead of a denormal or 0 (absolute error < 2e-38, and no denormals in
 * the states), above 88.72 it overflows to inf as exp does; NaN stays NaN (the clamps are
 * written so that a NaN x passes through them). */
static inline float gb_expf(float x) {
    x = x < -86.9f ? -86.9f : x;
    x = x > 88.8f ? 88.8f : x;
    const float shifter = 12582912.0f; /* 1.5 * 2^23 */
    float kf = x * 1.44269504f + shifter;
    uint32_t kb;
    memcpy(&kb, &kf, sizeof kb);
    kf -= shifter;                     /* k = round(x / ln2), as a float */
    float r = x - kf * 0.693359375f;   /* ln2 = 0.693359375 (exact in 9 bits) + ... */
    r = r - kf * -2.12194440e-4f;      /* ... the rest */
    float p = 2.0f * 1.383684576e-03f; /* 2 e^r */
    p = p * r + 2.0f * 8.374815807e-03f;
    p = p * r + 2.0f * 4.166822508e-02f;
    p = p * r + 2.0f * 1.666641980e-01f;
    p = p * r + 2.0f * 4.999999106e-01f;
    p = p * r + 2.0f;
    p = p * r + 2.0f;
    uint32_t sb = (kb - 0x4B400000u + 126u) << 23; /* bits of 2^(k-1) */
    float s;
    memcpy(&s, &sb, sizeof s);
    return p * s;
}

static float *gb_alloc(int64_t n_floats) {
    size_t bytes = ((size_t)n_floats * sizeof(float) + GB_ALIGN - 1) / GB_ALIGN * GB_ALIGN;
    return aligned_alloc(GB_ALIGN, bytes ? bytes : GB_ALIGN);
}

static inline int64_t gb_round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Channels per work item: about GB_GROUP, a multiple of GB_LANES, depending on D only. */
static int64_t gb_group_width(int64_t D) {
    int64_t groups = (D + GB_GROUP - 1) / GB_GROUP;
    return gb_round_up((D + groups - 1) / groups, GB_LANES);
}

/* Ask for a row of w floats ahead of use. Consecutive steps' rows are Bsz*D floats apart,
 * too far for the hardware prefetchers, and each row would otherwise wait on memory. */
static inline void gb_prefetch(const float *p, int64_t w, int for_write) {
    for (int64_t j = 0; j < w; j += GB_ALIGN / (int64_t)sizeof(float)) {
        if (for_write)
            __builtin_prefetch(p + j, 1, 3);
        else
            __builtin_prefetch(p + j, 0, 3);
    }
}

/* dst[0:w] = src[0:w], dst[w:wp] = 0: channel rows padded to whole register blocks, so the
 * inner loops have a fixed trip count and padding lanes compute harmless zeros. */
static inline void gb_row(float *restrict dst, const float *restrict src, int64_t w, int64_t wp) {
    memcpy(dst, src, sizeof(float) * (size_t)w);
    memset(dst + w, 0, sizeof(float) * (size_t)(wp - w));
}

int gb_scan_forward(const float *restrict u, const float *restrict delta,
                    const float *restrict At, const float *restrict Bm,
                    const float *restrict Cm, float *restrict y, float *restrict starts,
                    int64_t T, int64_t Bsz, int64_t D, int64_t N, int64_t chunk,
                    int nthreads) {
    if (chunk < 1) return -2;
    if (T <= 0 || Bsz <= 0 || D <= 0) return 0; /* nothing to compute */
    const int64_t W = gb_group_width(D);
    const int64_t G = (D + W - 1) / W;
    const int64_t items = Bsz * G;
    int failed = 0;
#pragma omp parallel num_threads(nthreads) reduction(| : failed)
    {
        float *Ap = gb_alloc(N * W); /* this item's columns of A, (N, wp) */
        float *h = gb_alloc(N * W);  /* state, (N, wp) */
        float *dl = gb_alloc(W), *du = gb_alloc(W), *yr = gb_alloc(W);
        const int ok = Ap && h && dl && du && yr;
        failed = !ok; /* every thread still takes part in the loop below */
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < items; item++) {
            if (!ok) continue;
            const int64_t b = item / G, d0 = (item % G) * W;
            const int64_t w = D - d0 < W ? D - d0 : W, wp = gb_round_up(w, GB_LANES);
            for (int64_t n = 0; n < N; n++) gb_row(Ap + n * wp, At + n * D + d0, w, wp);
            memset(h, 0, sizeof(float) * (size_t)(N * wp));
            for (int64_t t = 0; t < T; t++) {
                const int64_t row = (t * Bsz + b) * D + d0;
                const float *Bt = Bm + (t * Bsz + b) * N, *Ct = Cm + (t * Bsz + b) * N;
                if (t + GB_AHEAD < T) {
                    const int64_t ahead = row + GB_AHEAD * Bsz * D;
                    gb_prefetch(delta + ahead, w, 0);
                    gb_prefetch(u + ahead, w, 0);
                    gb_prefetch(y + ahead, w, 1);
                }
                if (t % chunk == 0) {
                    float *s = starts + ((t / chunk) * Bsz + b) * N * D + d0;
                    for (int64_t n = 0; n < N; n++)
                        memcpy(s + n * D, h + n * wp, sizeof(float) * (size_t)w);
                }
                gb_row(dl, delta + row, w, wp);
                gb_row(du, u + row, w, wp);
#pragma omp simd
                for (int64_t j = 0; j < wp; j++) du[j] *= dl[j];
                for (int64_t jb = 0; jb < wp; jb += GB_LANES) {
                    float acc[GB_LANES] = {0};
                    for (int64_t n = 0; n < N; n++) {
                        const float bn = Bt[n], cn = Ct[n];
                        const float *an = Ap + n * wp + jb;
                        float *hn = h + n * wp + jb;
#pragma omp simd
                        for (int64_t jj = 0; jj < GB_LANES; jj++) {
                            float hv = gb_expf(dl[jb + jj] * an[jj]) * hn[jj] + du[jb + jj] * bn;
                            hn[jj] = hv;
                            acc[jj] += cn * hv;
                        }
                    }
                    memcpy(yr + jb, acc, sizeof acc);
                }
                memcpy(y + row, yr, sizeof(float) * (size_t)w);
            }
        }
        free(Ap);
        free(h);
        free(dl);
        free(du);
        free(yr);
    }
    return failed ? -1 : 0;
}

int gb_scan_backward(const float *restrict u, const float *restrict delta,
                     const float *restrict At, const float *restrict Bm,
                     const float *restrict Cm, const float *restrict starts,
                     const float *restrict gy, float *restrict gu, float *restrict gdelta,
                     float *restrict gA, float *restrict gB, float *restrict gC, int64_t T,
                     int64_t Bsz, int64_t D, int64_t N, int64_t chunk, int nthreads) {
    if (chunk < 1) return -2;
    if (T <= 0 || Bsz <= 0 || D <= 0) { /* no terms: the reductions are zero */
        if (D > 0 && N > 0) memset(gA, 0, sizeof(float) * (size_t)(D * N));
        if (T > 0 && Bsz > 0 && N > 0) {
            memset(gB, 0, sizeof(float) * (size_t)(T * Bsz * N));
            memset(gC, 0, sizeof(float) * (size_t)(T * Bsz * N));
        }
        return 0;
    }
    const int64_t W = gb_group_width(D);
    const int64_t G = (D + W - 1) / W;
    const int64_t items = Bsz * G;
    const int64_t n_chunks = (T + chunk - 1) / chunk;
    const int64_t rows = T * Bsz * N;
    /* partial sums: gB, gC per channel group (straight into gB, gC if one group); gA per b */
    float *gBp = G > 1 ? gb_alloc(G * rows) : gB;
    float *gCp = G > 1 ? gb_alloc(G * rows) : gC;
    float *gAp = gb_alloc(Bsz * N * D);
    int failed = !gBp || !gCp || !gAp;
    if (!failed) {
#pragma omp parallel num_threads(nthreads) reduction(| : failed)
        {
            const int64_t st = N * W; /* floats per state */
            float *Ap = gb_alloc(st);
            float *H = gb_alloc((chunk + 1) * st); /* a chunk's replayed states, H[0] = start */
            float *E = gb_alloc(chunk * st);       /* their decays exp(delta A) */
            float *M = gb_alloc(st);   /* exp(delta_{t+1} A) g_{t+1}, carried backwards */
            float *gAl = gb_alloc(st); /* this item's dL/dA, (N, wp) */
            float *SB = gb_alloc(N * GB_LANES), *SC = gb_alloc(N * GB_LANES);
            float *dl = gb_alloc(W), *ur = gb_alloc(W), *du = gb_alloc(W), *gyr = gb_alloc(W);
            float *gur = gb_alloc(W), *gdr = gb_alloc(W);
            const int ok = Ap && H && E && M && gAl && SB && SC && dl && ur && du && gyr &&
                           gur && gdr;
            failed = !ok; /* every thread still takes part in the loop below */
#pragma omp for schedule(dynamic, 1)
            for (int64_t item = 0; item < items; item++) {
                if (!ok) continue;
                const int64_t b = item / G, g = item % G, d0 = g * W;
                const int64_t w = D - d0 < W ? D - d0 : W, wp = gb_round_up(w, GB_LANES);
                const int64_t sp = N * wp; /* floats per state of this item */
                for (int64_t n = 0; n < N; n++) gb_row(Ap + n * wp, At + n * D + d0, w, wp);
                memset(M, 0, sizeof(float) * (size_t)sp);
                memset(gAl, 0, sizeof(float) * (size_t)sp);
                for (int64_t c = n_chunks - 1; c >= 0; c--) {
                    const int64_t c0 = c * chunk;
                    const int64_t len = T - c0 < chunk ? T - c0 : chunk;
                    const float *s = starts + (c * Bsz + b) * N * D + d0;
                    for (int64_t n = 0; n < N; n++) gb_row(H + n * wp, s + n * D, w, wp);
                    for (int64_t k = 0; k < len; k++) { /* replay the chunk forwards */
                        const int64_t t = c0 + k, row = (t * Bsz + b) * D + d0;
                        const float *Bt = Bm + (t * Bsz + b) * N;
                        if (k + GB_AHEAD < len) {
                            gb_prefetch(delta + row + GB_AHEAD * Bsz * D, w, 0);
                            gb_prefetch(u + row + GB_AHEAD * Bsz * D, w, 0);
                        }
                        gb_row(dl, delta + row, w, wp);
                        gb_row(du, u + row, w, wp);
#pragma omp simd
                        for (int64_t j = 0; j < wp; j++) du[j] *= dl[j];
                        for (int64_t jb = 0; jb < wp; jb += GB_LANES) {
                            for (int64_t n = 0; n < N; n++) {
                                const float bn = Bt[n];
                                const int64_t o = n * wp + jb;
                                const float *an = Ap + o, *hp = H + k * sp + o;
                                float *hn = H + (k + 1) * sp + o, *en = E + k * sp + o;
#pragma omp simd
                                for (int64_t jj = 0; jj < GB_LANES; jj++) {
                                    float e = gb_expf(dl[jb + jj] * an[jj]);
                                    en[jj] = e;
                                    hn[jj] = e * hp[jj] + du[jb + jj] * bn;
                                }
                            }
                        }
                    }
                    for (int64_t k = len - 1; k >= 0; k--) { /* adjoint, backwards */
                        const int64_t t = c0 + k, row = (t * Bsz + b) * D + d0;
                        const float *Bt = Bm + (t * Bsz + b) * N;
                        const float *Ct = Cm + (t * Bsz + b) * N;
                        if (k >= GB_AHEAD) {
                            const int64_t ahead = row - GB_AHEAD * Bsz * D;
                            gb_prefetch(gy + ahead, w, 0);
                            gb_prefetch(gu + ahead, w, 1);
                            gb_prefetch(gdelta + ahead, w, 1);
                        }
                        gb_row(dl, delta + row, w, wp);
                        gb_row(ur, u + row, w, wp);
                        gb_row(gyr, gy + row, w, wp);
#pragma omp simd
                        for (int64_t j = 0; j < wp; j++) du[j] = dl[j] * ur[j];
                        memset(SB, 0, sizeof(float) * (size_t)(N * GB_LANES));
                        memset(SC, 0, sizeof(float) * (size_t)(N * GB_LANES));
                        for (int64_t jb = 0; jb < wp; jb += GB_LANES) {
                            float S[GB_LANES] = {0}, gd[GB_LANES] = {0};
                            for (int64_t n = 0; n < N; n++) {
                                const float bn = Bt[n], cn = Ct[n];
                                const int64_t o = n * wp + jb;
                                const float *an = Ap + o, *hp = H + k * sp + o;
                                const float *hn = H + (k + 1) * sp + o, *en = E + k * sp + o;
                                float *Mn = M + o, *gAn = gAl + o;
                                float *sbn = SB + n * GB_LANES, *scn = SC + n * GB_LANES;
#pragma omp simd
                                for (int64_t jj = 0; jj < GB_LANES; jj++) {
                                    const float gyv = gyr[jb + jj];
                                    float gv = cn * gyv + Mn[jj]; /* g_t = dL/dh_t */
                                    scn[jj] += gyv * hn[jj];
                                    sbn[jj] += du[jb + jj] * gv;
                                    S[jj] += bn * gv;
                                    float m = en[jj] * gv;
                                    Mn[jj] = m;
                                    float wv = m * hp[jj]; /* dL/d(delta_t A) */
                                    gAn[jj] += wv * dl[jb + jj];
                                    gd[jj] += wv * an[jj];
                                }
                            }
#pragma omp simd
                            for (int64_t jj = 0; jj < GB_LANES; jj++) {
                                gur[jb + jj] = dl[jb + jj] * S[jj];
                                gdr[jb + jj] = gd[jj] + ur[jb + jj] * S[jj];
                            }
                        }
                        memcpy(gu + row, gur, sizeof(float) * (size_t)w);
                        memcpy(gdelta + row, gdr, sizeof(float) * (size_t)w);
                        float *gBt = gBp + ((g * T + t) * Bsz + b) * N;
                        float *gCt = gCp + ((g * T + t) * Bsz + b) * N;
                        for (int64_t n = 0; n < N; n++) {
                            float sb = 0.0f, sc = 0.0f;
#pragma omp simd reduction(+ : sb, sc)
                            for (int64_t jj = 0; jj < GB_LANES; jj++) {
                                sb += SB[n * GB_LANES + jj];
                                sc += SC[n * GB_LANES + jj];
                            }
                            gBt[n] = sb;
                            gCt[n] = sc;
                        }
                    }
                }
                float *gAb = gAp + b * N * D + d0;
                for (int64_t n = 0; n < N; n++)
                    memcpy(gAb + n * D, gAl + n * wp, sizeof(float) * (size_t)w);
            }
            free(Ap);
            free(H);
            free(E);
            free(M);
            free(gAl);
            free(SB);
            free(SC);
            free(dl);
            free(ur);
            free(du);
            free(gyr);
            free(gur);
            free(gdr);
        }
    }
    if (!failed) {
        if (G > 1) {
#pragma omp parallel for num_threads(nthreads) schedule(static)
            for (int64_t i = 0; i < rows; i++) {
                float sb = 0.0f, sc = 0.0f;
                for (int64_t g = 0; g < G; g++) {
                    sb += gBp[g * rows + i];
                    sc += gCp[g * rows + i];
                }
                gB[i] = sb;
                gC[i] = sc;
            }
        }
#pragma omp parallel for num_threads(nthreads) schedule(static)
        for (int64_t d = 0; d < D; d++) {
            for (int64_t n = 0; n < N; n++) {
                float s = 0.0f;
                for (int64_t b = 0; b < Bsz; b++) s += gAp[(b * N + n) * D + d];
                gA[d * N + n] = s;
            }
        }
    }
    if (G > 1) {
        free(gBp);
        free(gCp);
    }
    free(gAp);
    return failed ? -1 : 0;
}
