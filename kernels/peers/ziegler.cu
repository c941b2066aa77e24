// ziegler.cu — the proportional KL controller of Ziegler et al. (2019) as TRL
// implements it, as a one-thread ISV controller (the KL coefficient in slot 486).
//
// Source: huggingface/trl v0.11.4 (the last release with the legacy
// PPOTrainer: it left in v0.12), trl/trainer/utils.py,
// AdaptiveKLController.update ("Adaptive KL controller described in the paper
// https://huggingface.co/papers/1909.08593"):
//   proportional_error = np.clip(current / target - 1, -0.2, 0.2)
//   mult = 1 + proportional_error * n_steps / self.horizon
//   self.value *= mult
// trl/trainer/ppo_trainer.py PPOTrainer.step calls
// update(stats["objective/kl"], config.batch_size * accelerator.num_processes);
// trl/trainer/ppo_config.py PPOConfig (v0.11.4) defaults: init_kl_coef = 0.2,
// target = 6.0, horizon = 10000.0, batch_size = 128. One process: n_steps = 128
// (v0.8 to v0.11; v0.1 to v0.7 defaulted batch_size to 256).
//
// Arithmetic as the source runs it: stats["objective/kl"] is a 0-d float32
// array (the torch mean through stats_to_np); under NumPy ≥ 2's promotion
// (NEP 50, which v0.11.4's numpy>=1.18.2 admits) every Python float and int
// meets it as a float32, so the whole update is float32 in TRL's order:
// ((kl / target) - 1), clipped, (err * n) / horizon, 1 + that, value * mult.
// np.clip lets NaN through; the clip here is written with comparisons so that
// it does too. No guard (TRL's trainer warns when the KL is below -1 and goes
// on): KL ≤ 0 lowers the coefficient by the saturated factor. No floor and no
// ceiling. Only the slot layout is this suite's.

#define ZIEGLER_KL_COEF_INDEX 486
#define ZIEGLER_KL_INDEX 488
#define ZIEGLER_KL_TARGET_INDEX 491

#define ERROR_CLIP 0.2f
#define N_STEPS 128.0f
#define HORIZON 10000.0f

extern "C" __global__ void ziegler_adaptive_kl(float* __restrict__ isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;

    const float current = isv[ZIEGLER_KL_INDEX];
    const float target = isv[ZIEGLER_KL_TARGET_INDEX];
    const float value = isv[ZIEGLER_KL_COEF_INDEX];

    float err = current / target - 1.0f;
    err = err < -ERROR_CLIP ? -ERROR_CLIP : (err > ERROR_CLIP ? ERROR_CLIP : err);
    const float mult = 1.0f + err * N_STEPS / HORIZON;

    isv[ZIEGLER_KL_COEF_INDEX] = value * mult;
}
