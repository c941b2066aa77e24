// ppo_paper.cu — the adaptive KL penalty coefficient of the PPO paper, as a
// one-thread ISV controller (β in slot 486).
//
// Source: Schulman, Wolski, Dhariwal, Radford, Klimov, "Proximal Policy
// Optimization Algorithms", arXiv:1707.06347 (2017), §4 "Adaptive KL Penalty
// Coefficient": after each policy update compute d = E[KL[π_old, π]];
//   if d < d_targ / 1.5, β ← β / 2
//   if d > d_targ × 1.5, β ← β × 2
// "The parameters 1.5 and 2 above are chosen heuristically"; the paper states
// no bound on β and calls its initial value unimportant.
//
// Not from the paper: the guards (KL, target or β ≤ 0 leave β alone) and the
// slot layout are this suite's convention, shared with the in-repo controller,
// so that every peer meets the same harness. Float32 throughout (the ISV is
// float32); each operation is written as the paper writes it: target / 1.5,
// target × 1.5, β / 2, β × 2. No floor and no ceiling: β may underflow to 0.

#define PPO_BETA_INDEX 486
#define PPO_KL_INDEX 488
#define PPO_KL_TARGET_INDEX 491

#define KL_BAND 1.5f
#define BETA_FACTOR 2.0f

extern "C" __global__ void ppo_paper_adaptive_kl(float* __restrict__ isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;

    const float d = isv[PPO_KL_INDEX];
    const float d_targ = isv[PPO_KL_TARGET_INDEX];
    float beta = isv[PPO_BETA_INDEX];

    if (d <= 0.0f || d_targ <= 0.0f || beta <= 0.0f) return;

    if (d < d_targ / KL_BAND) {
        beta = beta / BETA_FACTOR;
    } else if (d > d_targ * KL_BAND) {
        beta = beta * BETA_FACTOR;
    }

    isv[PPO_BETA_INDEX] = beta;
}
