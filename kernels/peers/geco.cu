// geco.cu — GECO's multiplicative Lagrange update (Rezende & Viola 2018,
// arXiv:1810.00597, Algorithm 1) as applied-ai-lab/genesis ships it, as a
// one-thread ISV controller on the KL: the multiplier in slot 486 (λ), the
// constrained value the KL EMA (slot 488), the goal the KL target (slot 491).
//
// Source: applied-ai-lab/genesis at 4483dfb, utils/geco.py, GECO.loss:
//   if self.err_ema is None: self.err_ema = err
//   else: self.err_ema = (1.0-self.alpha)*err + self.alpha*self.err_ema
//   constraint = (self.goal - self.err_ema)
//   if self.speedup is not None and constraint.item() > 0:
//       factor = torch.exp(self.speedup * self.step_size * constraint)
//   else: factor = torch.exp(self.step_size * constraint)
//   self.beta = (factor * self.beta).clamp(self.beta_min, self.beta_max)
// Defaults: genesis train.py main_flags (g_lr 1e-5 at 64×64, the resolution
// scale 64**2/img_size**2 = 1; g_alpha 0.99; g_init 1.0; g_min 1e-10;
// g_speedup 10.) and GECO.__init__ (beta_max = 1e10).
//
// Adaptation (the only one): genesis's β weighs the KL against a goal on the
// reconstruction error, so β grows while err < goal. Here λ is the multiplier
// of the constraint KL ≤ target itself, GECO's λ = 1/β: λ ← λ·exp(−step·c) with
// c = target − err_ema, speedup where c > 0 (the constraint met: λ falls
// faster, as genesis's β rises faster), bounds [1/β_max, 1/β_min] =
// [1e-10, 1e10] (g_min = 1e-10, beta_max = 1e10). The divisor is the source's
// factor, so λ/factor is β·factor mirrored.
//
// Arithmetic as the source runs it: float32 tensors (err, err_ema, beta);
// Python float coefficients enter as float32 ((1.0-alpha) and alpha each
// rounded once; speedup*step_size is a Python product, then float32). The
// exponential is taken in double and rounded once (torch's float32 exp is
// within an ulp or two of that, and differs between CPU and GPU; the suite
// takes the correctly rounded value so every backend and the spec model
// agree bit for bit). clamp passes a NaN through (torch.clamp).
// "err_ema is None" is a slot of its own (started: 0 before the first update).

#define GECO_LAMBDA_INDEX 486
#define GECO_KL_INDEX 488
#define GECO_GOAL_INDEX 491
#define GECO_ERR_EMA_INDEX 492
#define GECO_STARTED_INDEX 493

#define GECO_STEP_SIZE 1e-5
#define GECO_ALPHA 0.99
#define GECO_SPEEDUP 10.0
#define GECO_LAMBDA_MIN 1e-10f
#define GECO_LAMBDA_MAX 1e10f

extern "C" __global__ void geco_update(float* __restrict__ isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;

    const float err = isv[GECO_KL_INDEX];
    const float goal = isv[GECO_GOAL_INDEX];
    float lam = isv[GECO_LAMBDA_INDEX];
    float err_ema = isv[GECO_ERR_EMA_INDEX];

    if (isv[GECO_STARTED_INDEX] == 0.0f) {
        err_ema = err;
    } else {
        err_ema = (float)(1.0 - GECO_ALPHA) * err + (float)GECO_ALPHA * err_ema;
    }
    const float constraint = goal - err_ema;
    const float scale = constraint > 0.0f ? (float)(GECO_SPEEDUP * GECO_STEP_SIZE) : (float)GECO_STEP_SIZE;
    const float factor = (float)exp((double)(scale * constraint));
    lam = lam / factor;
    lam = lam < GECO_LAMBDA_MIN ? GECO_LAMBDA_MIN : (lam > GECO_LAMBDA_MAX ? GECO_LAMBDA_MAX : lam);

    isv[GECO_ERR_EMA_INDEX] = err_ema;
    isv[GECO_STARTED_INDEX] = 1.0f;
    isv[GECO_LAMBDA_INDEX] = lam;
}
