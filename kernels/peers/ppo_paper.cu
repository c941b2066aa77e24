// ppo_paper.cu — the adaptive KL penalty coefficient of the PPO paper, as a
// one-thread ISV controller (β in slot 486).
//
// Source: Schulman, Wolski, Dhariwal, Radford, Klimov, "Proximal Policy
// Optimization Algorithms", arXiv:1707.06347v2 (2017), §4 "Adaptive KL Penalty
// Coefficient": after each policy update compute d = E[KL[π_old, π]];
//   If d < d_targ / 1.5, β ← β / 2
//   If d > d_targ × 1.5, β ← β × 2
// "The parameters 1.5 and 2 above are chosen heuristically"; the paper states
// no bound on β, no test of d, d_targ or β, and calls β's initial value unimportant.
//
// The paper's arithmetic is the reals'. For float32 d and d_targ the double
// comparisons below decide exactly as the reals do: d_targ × 1.5 is exact in
// double, and d_targ / 1.5 rounded to double cannot cross a float32 d (3d and
// 2·d_targ are exact doubles: d = d_targ/1.5 only where the quotient is exact).
// The two Ifs are two tests on the same d; both hold only for d_targ < 0, and
// then β is halved and doubled, in the paper's order. β / 2 and β × 2 are
// float32 operations: one rounding of the real result to the float32 slot.
// No guard, no floor, no ceiling: KL ≤ 0 halves β, and β may underflow to 0.
// Only the slot layout is this suite's.

#define PPO_BETA_INDEX 486
#define PPO_KL_INDEX 488
#define PPO_KL_TARGET_INDEX 491

#define KL_BAND 1.5
#define BETA_FACTOR 2.0f

extern "C" __global__ void ppo_paper_adaptive_kl(float* __restrict__ isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;

    const double d = isv[PPO_KL_INDEX];
    const double d_targ = isv[PPO_KL_TARGET_INDEX];
    float beta = isv[PPO_BETA_INDEX];

    if (d < d_targ / KL_BAND) {
        beta = beta / BETA_FACTOR;
    }
    if (d > d_targ * KL_BAND) {
        beta = beta * BETA_FACTOR;
    }

    isv[PPO_BETA_INDEX] = beta;
}
