// modular_rl.cu — the adaptive penalty of John Schulman's modular_rl PPO, as a
// one-thread ISV controller (kl_coeff in slot 486).
//
// Source: joschu/modular_rl at 6970cde (2018-05-20, the repository's last
// commit), modular_rl/ppo.py, PpoLbfgsUpdater.__call__ (PpoSgdUpdater.__call__
// has the same rule):
//   if klafter > 1.3*self.cfg["kl_target"]:   self.kl_coeff *= 1.5
//   elif klafter < 0.7*self.cfg["kl_target"]: self.kl_coeff /= 1.5
// Defaults: self.kl_coeff = 1.0 (__init__), kl_target = 1e-2 (options).
// No bound on kl_coeff, no test of the KL, the target or the coefficient.
//
// Arithmetic as the source runs it: Python 2 floats and Theano's default
// floatX (float64), so every threshold, comparison and update is in double.
// The ISV slot holds float32: the double result is rounded once to float32
// each step (between updates Python keeps all 53 bits; this slot cannot).
// For one update from a float32 coefficient that rounding gives the float32
// product or quotient exactly (double has more than 2·24 + 2 bits).
// No guard: KL ≤ 0 (below 0.7·target) lowers the coefficient. Only the slot
// layout is this suite's.

#define MRL_KL_COEFF_INDEX 486
#define MRL_KL_INDEX 488
#define MRL_KL_TARGET_INDEX 491

#define KL_UPPER_FACTOR 1.3
#define KL_LOWER_FACTOR 0.7
#define COEFF_FACTOR 1.5

extern "C" __global__ void modular_rl_adapt_kl_coeff(float* __restrict__ isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;

    const double klafter = isv[MRL_KL_INDEX];
    const double kl_target = isv[MRL_KL_TARGET_INDEX];
    double kl_coeff = isv[MRL_KL_COEFF_INDEX];

    if (klafter > KL_UPPER_FACTOR * kl_target) {
        kl_coeff = kl_coeff * COEFF_FACTOR;
    } else if (klafter < KL_LOWER_FACTOR * kl_target) {
        kl_coeff = kl_coeff / COEFF_FACTOR;
    }

    isv[MRL_KL_COEFF_INDEX] = (float)kl_coeff;
}
