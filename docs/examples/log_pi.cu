// log_pi.cu — an example stateful candidate: a PI controller on log λ with
// its integral in ISV slot 492 (declared in docs/examples/log_pi.toml).
//
//   e = ln(KL / target)                      (double, rounded once to float32)
//   I = clamp(I + K_I·e, I_MIN, I_MAX)       (anti-windup: the integral is bounded)
//   λ = clamp(λ_REF·exp(K_P·e + I), MIN_LAMBDA, MAX_LAMBDA)
//
// KL or target not > 0 or not finite, or λ not > 0: λ and I are left alone.
// I_MIN and I_MAX are ln(MIN_LAMBDA/λ_REF) and ln(MAX_LAMBDA/λ_REF): the
// integral alone can reach each bound and no further, so it never winds up
// past what λ can show. exp and log are taken in double and rounded once, so
// the host build, the GPU and the spec model give the same bits.

#define LPI_LAMBDA_INDEX 486
#define LPI_KL_INDEX 488
#define LPI_TARGET_INDEX 491
#define LPI_INTEGRAL_INDEX 492

#define LAMBDA_REF 0.1f
#define MIN_LAMBDA 0.05f
#define MAX_LAMBDA 1.0f
#define K_P 0.5f
#define K_I 0.05f
#define I_MIN -0.6931471805599453f
#define I_MAX 2.302585092994046f

extern "C" __global__ void log_pi_controller(float* __restrict__ isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;

    const float kl = isv[LPI_KL_INDEX];
    const float target = isv[LPI_TARGET_INDEX];
    const float lambda = isv[LPI_LAMBDA_INDEX];
    if (!(kl > 0.0f) || !(target > 0.0f) || !isfinite(kl) || !isfinite(target) || !(lambda > 0.0f)) return;

    const float e = (float)log((double)kl / (double)target);
    float integral = isv[LPI_INTEGRAL_INDEX] + K_I * e;
    integral = fminf(fmaxf(integral, I_MIN), I_MAX);
    const float arg = K_P * e + integral;
    float next = LAMBDA_REF * (float)exp((double)arg);
    next = fminf(fmaxf(next, MIN_LAMBDA), MAX_LAMBDA);

    isv[LPI_INTEGRAL_INDEX] = integral;
    isv[LPI_LAMBDA_INDEX] = next;
}
