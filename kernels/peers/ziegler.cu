// ziegler.cu — the proportional KL controller of Ziegler et al. (2019) as TRL
// implements it, as a one-thread ISV controller (the KL coefficient in slot 486).
//
// Source: huggingface/trl, trl/trainer/utils.py, AdaptiveKLController.update
// ("Adaptive KL controller described in the paper
// https://arxiv.org/pdf/1909.08593.pdf"):
//   proportional_error = np.clip(current / target - 1, -0.2, 0.2)
//   mult = 1 + proportional_error * n_steps / self.horizon
//   self.value *= mult
// The legacy PPOTrainer calls update(kl, config.batch_size * num_processes);
// PPOConfig (trl/trainer/ppo_config.py) defaults: init_kl_coef = 0.2,
// target = 6.0, horizon = 10000.0, batch_size = 128. One process: n_steps = 128.
//
// Not from TRL: the guards (KL, target or coefficient ≤ 0 leave it alone;
// TRL has none) and the slot layout are this suite's convention. TRL computes
// with NumPy (float64, or float32 under NumPy 2's promotion rules); this kernel
// is float32 with TRL's order: ((kl / target) - 1), clipped, (err * n) / horizon,
// 1 + that, value * mult. The clip is written so that NaN passes through, as
// np.clip lets it. No floor and no ceiling.

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

    if (current <= 0.0f || target <= 0.0f || value <= 0.0f) return;

    float err = current / target - 1.0f;
    err = err < -ERROR_CLIP ? -ERROR_CLIP : (err > ERROR_CLIP ? ERROR_CLIP : err);
    const float mult = 1.0f + err * N_STEPS / HORIZON;

    isv[ZIEGLER_KL_COEF_INDEX] = value * mult;
}
