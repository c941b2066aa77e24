// learning_loop.cuh — the learning study's loop (repro/learning), every step of many runs in one call.
//
// NVRTC compiles this file after the controller source, RLQ_CONTROLLER and the slot macros defined (as for
// looped_harness.cuh), as one thread per run. The host compiles it once per slot layout with host_shim.h,
// RLQ_CONTROLLER a per-thread pointer to the controller's own library (rlq_learn_with), and calls rlq_learn on
// ranges of runs from several threads. Either way each run
// executes the statement of repro/learning/reference.py (the array-module loop, which the tests hold
// this file to) and calls the controller as an ordinary function on its own ISV row once per step.
//
// Why compiled: per step the array form is ~100 small array operations plus one controller launch per
// controller; on the GPU that is launch-bound (the pre-registered study took minutes), here it is one
// launch per controller for the whole study.
//
// Units: rewards are divided by the reward scale (reward-range units); KL in nats; steps are
// environment steps (= controller calls). Scratch per run: Q [S*A], θ [S*A], V [S], visited [S]
// (doubles), at work[run * run_stride + k * elem_stride]: the host passes (1, W) so a run's scratch is
// contiguous, the GPU (N, 1) so that neighbouring threads touch neighbouring words.
//
// The second study's axes (issue 17; per run, each 0 reproduces the first study's loop operation for operation):
// where the controller's KL is measured (kl_site: the visited state; a replay sample of the last
// RLQ_L_REPLAY_CAP visited states; the even states only), when (kl_before: π before or after this step's
// update), where the auxiliary reward is paid (aux_odd: odd states only) and π's form (features: 0 = the
// tabular aliased view; d > 0 = a linear softmax over d ±1 features of the state, fixed by seed, so that a
// step at one state moves π at every other). Scratch then adds the replay ring [cap], its count per state [S] and the features [S·D].

#define RLQ_L_MAX_A 8  // largest action count (toy-text tasks have at most 6); checked by the caller

// Parameters, in the order of par[] (repro/learning/agent.py packs them).
enum { RLQ_L_GAMMA, RLQ_L_Q_LR, RLQ_L_Q_TEMPERATURE, RLQ_L_ACTOR_LR, RLQ_L_CRITIC_LR, RLQ_L_DISTILL_LR,
       RLQ_L_EMA_RATE, RLQ_L_KL_TARGET, RLQ_L_REWARD_SCALE, RLQ_L_LN10,
       RLQ_L_QUIET_KL, RLQ_L_FLOOR_LAMBDA };  // float32 values: the signature's KL below target/tolerance, λ at floor
// Integer dimensions, in the order of dims[].
enum { RLQ_L_S, RLQ_L_A, RLQ_L_M, RLQ_L_MAX_EPISODE, RLQ_L_STEPS, RLQ_L_EVAL_EVERY,
       RLQ_L_REPLAY_CAP, RLQ_L_REPLAY_SAMPLE, RLQ_L_FEATURES_MAX };
// Where the KL is measured (kl_site[]).
enum { RLQ_L_KL_VISITED, RLQ_L_KL_REPLAY, RLQ_L_KL_EVEN };
// Random streams (repro/learning/rng.py): one per use.
enum { RLQ_L_ACTION, RLQ_L_ENV, RLQ_L_RESET, RLQ_L_AUX, RLQ_L_REPLAY, RLQ_L_FEATURE };

// SplitMix64's finaliser; u(seed, step, stream) as repro/learning/rng.py draws it (integer math: exact).
__device__ static inline unsigned long long rlq_l_mix(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
__device__ static inline unsigned long long rlq_l_bits(unsigned long long seed, long long step, int stream) {
    const unsigned long long golden = 0x9E3779B97F4A7C15ULL;
    return rlq_l_mix(rlq_l_mix(seed * golden + (unsigned long long)(stream + 1)) + (unsigned long long)step * golden);
}
__device__ static inline double rlq_l_uniform(unsigned long long seed, long long step, int stream) {
    return (double)(rlq_l_bits(seed, step, stream) >> 11) * (1.0 / 9007199254740992.0);  // 53 bits
}

// exp and log from +, −, ×, ÷ and exact bit operations only, so that the host and the GPU compute the
// same bits (each library's own exp/log differ in the last bit now and then, and over a study's 10⁹ steps a
// last bit decides a few sampled actions, and a few runs in 10^4 of the pre-registered study ended with another
// verdict on the GPU than on the CPU).
// Both stay within 2 ulp of NumPy's (tests/test_study.py measures it).
#define RLQ_L_INF __longlong_as_double(0x7FF0000000000000LL)
#define RLQ_L_NAN __longlong_as_double(0x7FF8000000000000LL)
__device__ static inline double rlq_l_pow2(int k) {  // 2^k for -1022 <= k <= 1023
    return __longlong_as_double((long long)(k + 1023) << 52);
}
// c[0]·x^(n−1) + … + c[n−1], by Horner's rule (no fused multiply-add: both builds forbid contraction).
__device__ static inline double rlq_l_horner(const double* c, int n, double x) {
    double p = c[0];
    for (int i = 1; i < n; ++i) p = p * x + c[i];
    return p;
}
__device__ static inline double rlq_l_exp(double x) {
    if (x != x) return x;
    if (x > 709.8) return RLQ_L_INF;
    if (x < -746.0) return 0.0;
    // x = k ln2 + r, |r| <= ln2 / 2 (Cody–Waite: k × the high part of ln2 is exact)
    const double k = floor(x * 0x1.71547652b82fep+0 + 0.5);
    const double r = (x - k * 0x1.62e42fee00000p-1) - k * 0x1.a39ef35793c76p-33;
    // Taylor to r^13 (the remainder is below 2^-57 on this interval, a small part of an ulp), Horner
    const double taylor[] = {0x1.6124613a86d09p-33, 0x1.1eed8eff8d898p-29, 0x1.ae64567f544e4p-26,  // 1/13! … 1/11!
                             0x1.27e4fb7789f5cp-22, 0x1.71de3a556c734p-19, 0x1.a01a01a01a01ap-16,
                             0x1.a01a01a01a01ap-13, 0x1.6c16c16c16c17p-10, 0x1.1111111111111p-7,
                             0x1.5555555555555p-5, 0x1.5555555555555p-3, 0x1.0000000000000p-1, 1.0, 1.0};  // … 1/0!
    const double p = rlq_l_horner(taylor, 14, r);
    const int ki = (int)k;
    if (ki > 1023) return p * 2.0 * rlq_l_pow2(ki - 1);
    if (ki < -1021) return p * rlq_l_pow2(ki + 1000) * rlq_l_pow2(-1000);  // one rounding, into the subnormals
    return p * rlq_l_pow2(ki);
}
__device__ static inline double rlq_l_log(double x) {
    if (x != x) return x;
    if (x < 0.0) return RLQ_L_NAN;
    if (x == 0.0) return -RLQ_L_INF;
    if (x == RLQ_L_INF) return x;
    int e = 0;
    if (x < 0x1p-1022) {  // subnormal: make it normal first
        x *= 0x1p54;
        e = -54;
    }
    const long long bits = __double_as_longlong(x);
    e += (int)((bits >> 52) & 0x7FF) - 1023;
    double m = __longlong_as_double((bits & 0x000FFFFFFFFFFFFFLL) | 0x3FF0000000000000LL);  // [1, 2)
    if (m > 0x1.6a09e667f3bcdp+0) {  // above √2: halve, so that |f| <= 0.172
        m *= 0.5;
        e += 1;
    }
    // log m = 2 atanh f, f = (m − 1)/(m + 1): the odd series to f^23 (the remainder is below 2^-58 of the result)
    const double f = (m - 1.0) / (m + 1.0), f2 = f * f;
    const double odd[] = {0x1.642c8590b2164p-4, 0x1.8618618618618p-4, 0x1.af286bca1af28p-4,  // 2/23, 2/21, 2/19
                          0x1.e1e1e1e1e1e1ep-4, 0x1.1111111111111p-3, 0x1.3b13b13b13b14p-3,
                          0x1.745d1745d1746p-3, 0x1.c71c71c71c71cp-3, 0x1.2492492492492p-2,
                          0x1.999999999999ap-2, 0x1.5555555555555p-1};  // … 2/5, 2/3
    const double s = rlq_l_horner(odd, 11, f2);
    const double log_m = 2.0 * f + f * (f2 * s);
    const double ed = (double)e;
    return ed * 0x1.62e42fee00000p-1 + (ed * 0x1.a39ef35793c76p-33 + log_m);
}

// NumPy's max/min reductions propagate NaN (C's fmax/fmin would drop it): a diverged run stays visible.
__device__ static inline double rlq_l_max(double m, double x) { return m != m ? m : (x != x || x > m) ? x : m; }
__device__ static inline double rlq_l_min(double m, double x) { return m != m ? m : (x != x || x < m) ? x : m; }

// First index whose cumulative probability exceeds u (0 when none does), as gymnasium's categorical_sample.
__device__ static inline long long rlq_l_first_above(const double* cum, long long n, double u) {
    for (long long i = 0; i < n; ++i)
        if (cum[i] > u) return i;
    return 0;
}

// p = softmax(x), log_p = log softmax(x), in the reference's order of operations.
__device__ static inline void rlq_l_softmax(const double* x, int n, double* p, double* log_p) {
    double m = x[0];
    for (int a = 1; a < n; ++a) m = rlq_l_max(m, x[a]);
    double z[RLQ_L_MAX_A];
    double total = 0.0;
    for (int a = 0; a < n; ++a) {
        z[a] = x[a] - m;
        total += rlq_l_exp(z[a]);
    }
    const double lse = rlq_l_log(total);
    for (int a = 0; a < n; ++a) {
        log_p[a] = z[a] - lse;
        p[a] = rlq_l_exp(log_p[a]);
    }
}

// π's logits at state st: θ at st's observation (tabular view) or Σ_k φ_k(st)·W_k (linear; φ = ±1, summed in k order).
__device__ static inline void rlq_l_logits(const double* w, long long es, int S, int A, long long feat, long long pv,
                                           const double* phi, long long st, double* x) {
    const double* theta = w + (long long)S * A * es;
    if (feat == 0) {
        for (int a = 0; a < A; ++a) x[a] = theta[((st / pv) * A + a) * es];
        return;
    }
    for (int a = 0; a < A; ++a) x[a] = 0.0;
    for (long long k = 0; k < feat; ++k) {
        const bool plus = phi[(st * feat + k) * es] > 0.0;
        for (int a = 0; a < A; ++a) x[a] = x[a] + (plus ? theta[(k * A + a) * es] : -theta[(k * A + a) * es]);
    }
}

// KL(p_Q(st) ‖ π(st)) from the current Q and π.
__device__ static inline double rlq_l_kl_at(const double* w, long long es, int S, int A, long long feat, long long pv,
                                            const double* phi, long long st, double temperature) {
    double x[RLQ_L_MAX_A], p_q[RLQ_L_MAX_A], log_p_q[RLQ_L_MAX_A], pi[RLQ_L_MAX_A], log_pi[RLQ_L_MAX_A];
    for (int a = 0; a < A; ++a) x[a] = w[(st * A + a) * es] / temperature;
    rlq_l_softmax(x, A, p_q, log_p_q);
    rlq_l_logits(w, es, S, A, feat, pv, phi, st, x);
    rlq_l_softmax(x, A, pi, log_pi);
    double kl = 0.0;
    for (int a = 0; a < A; ++a) kl += p_q[a] * (log_p_q[a] - log_pi[a]);
    return kl;
}

extern "C" __global__ void rlq_learn(
    float* isv,                                      // [N][RLQ_ISV_LEN], each row seeded with its run's λ
    const unsigned long long* seed,                  // [N]
    const double* beta, const double* aux_reward,    // [N] entropy bonus; auxiliary reward (reward-range units)
    const long long* view,                           // [N] π observes s / view
    const long long* kl_site, const long long* kl_before,  // [N] the second study's axes (header)
    const long long* aux_odd, const long long* features,
    const double* cum, const long long* next_state,  // [S][A][M] transition table (cumulative probabilities)
    const double* reward, const unsigned char* terminated,
    const double* initial_cum,                       // [S]
    const double* par, const long long* dims,        // parameters and dimensions (enums above)
    double* work, long long elem_stride, long long run_stride,
    float* out_lambda, double* out_agree_mean, double* out_log10_agree_min,  // [E][N], E = steps / eval_every
    double* out_kl_ema, double* out_episode_return,
    double* out_agree_unique, double* out_log10_min_unique, double* out_n_unique,   // ties excluded
    double* out_agree_odd, double* out_log10_min_odd,                               // odd states, ties excluded
    double* out_agree_replay, double* out_log10_min_replay,                         // the replay ring's entries
    double* out_quiet_floor_run,  // longest run of steps (in this window) with λ at floor while the KL is quiet
    long long n_runs, long long first, long long last) {
    const int S = (int)dims[RLQ_L_S], A = (int)dims[RLQ_L_A];
    const long long M = dims[RLQ_L_M], max_episode = dims[RLQ_L_MAX_EPISODE];
    const long long steps = dims[RLQ_L_STEPS], eval_every = dims[RLQ_L_EVAL_EVERY];
    const double gamma = par[RLQ_L_GAMMA], q_lr = par[RLQ_L_Q_LR], temperature = par[RLQ_L_Q_TEMPERATURE];
    const double actor_lr = par[RLQ_L_ACTOR_LR], critic_lr = par[RLQ_L_CRITIC_LR];
    const double distill_lr = par[RLQ_L_DISTILL_LR], rate = par[RLQ_L_EMA_RATE], scale = par[RLQ_L_REWARD_SCALE];
    const float target32 = (float)par[RLQ_L_KL_TARGET];
    const float quiet32 = (float)par[RLQ_L_QUIET_KL], floor32 = (float)par[RLQ_L_FLOOR_LAMBDA];
    const long long cap = dims[RLQ_L_REPLAY_CAP], n_sample = dims[RLQ_L_REPLAY_SAMPLE];
    const long long feat_max = dims[RLQ_L_FEATURES_MAX];
    for (long long r = first + (long long)blockIdx.x * blockDim.x + threadIdx.x; r < last;
         r += (long long)gridDim.x * blockDim.x) {
        double* w = work + r * run_stride;
        const long long es = elem_stride;
#define RLQ_L_Q(s, a) w[((long long)(s) * A + (a)) * es]
#define RLQ_L_THETA(o, a) w[((long long)S * A + (long long)(o) * A + (a)) * es]
#define RLQ_L_V(o) w[((long long)2 * S * A + (o)) * es]
#define RLQ_L_VISITED(s) w[((long long)2 * S * A + S + (s)) * es]
#define RLQ_L_RING(i) w[((long long)2 * S * A + 2 * S + (i)) * es]
#define RLQ_L_COUNT(s) w[((long long)2 * S * A + 2 * S + cap + (s)) * es]
        double* const phi = w + ((long long)2 * S * A + 3 * S + cap) * es;  // [S][feat] ±1
        for (long long k = 0; k < (long long)2 * S * A + 3 * S + cap + S * feat_max; ++k) w[k * es] = 0.0;
        float* v = isv + r * RLQ_ISV_LEN;
        const unsigned long long sd = seed[r];
        const long long feat = features[r];
        const long long pv = feat > 0 ? 1 : view[r];  // the linear policy's critic is tabular over states
        const long long site = kl_site[r], before = kl_before[r], odd_only = aux_odd[r];
        for (long long k = 0; k < S * feat; ++k) phi[k * es] = (rlq_l_bits(sd, k, RLQ_L_FEATURE) >> 63) ? 1.0 : -1.0;
        long long quiet_run = 0, quiet_max = 0;
        const double b = beta[r], aux = aux_reward[r];
        double lam = (double)v[RLQ_LAMBDA_SLOT];
        double ema = 0.0, ep_ret = 0.0, win_ret = 0.0, win_done = 0.0;
        long long t_ep = 0;
        long long s = rlq_l_first_above(initial_cum, S, rlq_l_uniform(sd, 0, RLQ_L_RESET));
        double x[RLQ_L_MAX_A], pi[RLQ_L_MAX_A], log_pi[RLQ_L_MAX_A], p_q[RLQ_L_MAX_A], log_p_q[RLQ_L_MAX_A];
        for (long long t = 0; t < steps; ++t) {
            RLQ_L_VISITED(s) = 1.0;
            if (cap > 0) {  // the ring of the last cap visited states, and how many entries hold each state
                if (t >= cap) RLQ_L_COUNT((long long)RLQ_L_RING(t % cap)) -= 1.0;
                RLQ_L_RING(t % cap) = (double)s;
                RLQ_L_COUNT(s) += 1.0;
            }
            const long long o = s / pv;
            rlq_l_logits(w, es, S, A, feat, pv, phi, s, x);
            rlq_l_softmax(x, A, pi, log_pi);
            const double u_action = rlq_l_uniform(sd, t, RLQ_L_ACTION);
            const double u_env = rlq_l_uniform(sd, t, RLQ_L_ENV);
            const double u_reset = rlq_l_uniform(sd, t + 1, RLQ_L_RESET);
            // the action: how many cumulative probabilities lie at or below u (the last action at most)
            int act = 0;
            double c = 0.0;
            for (int a = 0; a < A; ++a) {
                c = a == 0 ? pi[0] : c + pi[a];
                act += c <= u_action;
            }
            act = act < A - 1 ? act : A - 1;
            const long long cell = (s * A + act) * M;
            const long long i = rlq_l_first_above(cum + cell, M, u_env);
            const long long s2 = next_state[cell + i];
            const double rew = reward[cell + i];
            const bool term = terminated[cell + i] != 0;
            t_ep += 1;
            const bool done = term || t_ep >= max_episode;
            const double rn = rew / scale;
            const double cont = gamma * (term ? 0.0 : 1.0);
            // Q-learning (the max reads Q before this update, as the reference does)
            const double q_sa = RLQ_L_Q(s, act);
            double best = RLQ_L_Q(s2, 0);
            for (int a = 1; a < A; ++a) best = rlq_l_max(best, RLQ_L_Q(s2, a));
            RLQ_L_Q(s, act) = q_sa + q_lr * (rn + cont * best - q_sa);
            // the actor's critic, on π's observations, with the auxiliary reward for the fixed action
            const long long o2 = s2 / pv;
            const bool aux_hit = (long long)(rlq_l_bits(sd, s, RLQ_L_AUX) % (unsigned long long)A) == act;
            const bool aux_here = odd_only == 0 || (s & 1) == 1;
            const double r_pi = rn + aux * (aux_hit && aux_here ? 1.0 : 0.0);
            const double delta = r_pi + cont * RLQ_L_V(o2) - RLQ_L_V(o);
            RLQ_L_V(o) = RLQ_L_V(o) + critic_lr * delta;
            // Q's Boltzmann policy at s, the actor's step, the distillation toward it
            for (int a = 0; a < A; ++a) x[a] = RLQ_L_Q(s, a) / temperature;
            rlq_l_softmax(x, A, p_q, log_p_q);
            double plogp = 0.0;
            for (int a = 0; a < A; ++a) plogp += pi[a] * log_pi[a];
            const double entropy = -plogp;
            const double push = actor_lr * delta, pull = distill_lr * lam;
            double grad[RLQ_L_MAX_A];
            for (int a = 0; a < A; ++a)
                grad[a] = push * ((a == act ? 1.0 : 0.0) - pi[a]) - b * pi[a] * (log_pi[a] + entropy)
                          + pull * (p_q[a] - pi[a]);
            // the KL the controller sees: at the visited state, a replay sample or the even states; before or
            // after this step's update of π (replay: the mean over n_sample draws from the ring)
            const bool measured = site != RLQ_L_KL_EVEN || (s & 1) == 0;
            double kl = 0.0;
            for (int pass = 0; pass < 2; ++pass) {
                if (measured && (pass == 0) == (before != 0)) {
                    if (site == RLQ_L_KL_REPLAY) {
                        const long long filled = t + 1 < cap ? t + 1 : cap;
                        double total = 0.0;
                        for (long long j = 0; j < n_sample; ++j) {
                            const long long z = (long long)RLQ_L_RING((long long)(
                                rlq_l_bits(sd, t * n_sample + j, RLQ_L_REPLAY) % (unsigned long long)filled));
                            total += rlq_l_kl_at(w, es, S, A, feat, pv, phi, z, temperature);
                        }
                        kl = total / (double)n_sample;
                    } else if (pass == 0) {
                        for (int a = 0; a < A; ++a) kl += p_q[a] * (log_p_q[a] - log_pi[a]);
                    } else {
                        rlq_l_logits(w, es, S, A, feat, pv, phi, s, x);
                        rlq_l_softmax(x, A, pi, log_pi);
                        for (int a = 0; a < A; ++a) kl += p_q[a] * (log_p_q[a] - log_pi[a]);
                    }
                }
                if (pass == 1) break;
                if (feat == 0) {
                    for (int a = 0; a < A; ++a) RLQ_L_THETA(o, a) = RLQ_L_THETA(o, a) + grad[a];
                } else {
                    // W_k += φ_k(s)·grad / d: the logits at s move by grad, as the tabular step moves them
                    for (long long k = 0; k < feat; ++k) {
                        const bool plus = phi[(s * feat + k) * es] > 0.0;
                        for (int a = 0; a < A; ++a) {
                            const double g = grad[a] / (double)feat;
                            RLQ_L_THETA(k, a) = RLQ_L_THETA(k, a) + (plus ? g : -g);
                        }
                    }
                }
            }
            if (measured) ema = (1.0 - rate) * ema + rate * kl;
            v[RLQ_KL_SLOT] = (float)ema;
            v[RLQ_TARGET_SLOT] = target32;
            RLQ_CONTROLLER(v);
            lam = (double)v[RLQ_LAMBDA_SLOT];
            // the incident's signature, controller side: λ at the floor while the KL it sees is quiet
            quiet_run = v[RLQ_LAMBDA_SLOT] <= floor32 && v[RLQ_KL_SLOT] < quiet32 ? quiet_run + 1 : 0;
            quiet_max = quiet_run > quiet_max ? quiet_run : quiet_max;
            // episodes
            ep_ret += rew;
            win_ret += done ? ep_ret : 0.0;
            win_done += done ? 1.0 : 0.0;
            if (done) {
                ep_ret = 0.0;
                t_ep = 0;
                s = rlq_l_first_above(initial_cum, S, u_reset);
            } else {
                s = s2;
            }
            if ((t + 1) % eval_every == 0) {
                // agreement over the states visited so far: log Σ over Q's greedy actions of π(a | s's observation)
                double total = 0.0, log_min = RLQ_L_INF;
                double u_total = 0.0, u_min = RLQ_L_INF, o_total = 0.0, o_min = RLQ_L_INF;
                double r_total = 0.0, r_min = RLQ_L_INF, n_ring = 0.0;  // the ring's entries, each state × its count
                long long n_visited = 0, n_unique = 0, n_odd = 0;
                for (int st = 0; st < S; ++st) {
                    if (RLQ_L_VISITED(st) == 0.0) continue;
                    rlq_l_logits(w, es, S, A, feat, pv, phi, st, x);
                    rlq_l_softmax(x, A, pi, log_pi);
                    double qmax = RLQ_L_Q(st, 0);
                    for (int a = 1; a < A; ++a) qmax = rlq_l_max(qmax, RLQ_L_Q(st, a));
                    double top = -RLQ_L_INF;
                    int n_top = 0, greedy = 0;
                    for (int a = 0; a < A; ++a) {
                        const bool is_top = RLQ_L_Q(st, a) == qmax;
                        n_top += is_top;
                        greedy = is_top ? a : greedy;
                        x[a] = is_top ? log_pi[a] : -RLQ_L_INF;
                        top = rlq_l_max(top, x[a]);
                    }
                    double mass = 0.0;
                    for (int a = 0; a < A; ++a) mass += rlq_l_exp(x[a] - top);
                    const double log_agree = top + rlq_l_log(mass);
                    total += rlq_l_exp(log_agree);
                    log_min = rlq_l_min(log_min, log_agree);
                    n_visited += 1;
                    if (n_top != 1) continue;  // ties excluded from here on
                    const double lu = log_pi[greedy], agree = rlq_l_exp(lu);
                    u_total += agree;
                    u_min = rlq_l_min(u_min, lu);
                    n_unique += 1;
                    if (st & 1) {
                        o_total += agree;
                        o_min = rlq_l_min(o_min, lu);
                        n_odd += 1;
                    }
                    if (cap > 0 && RLQ_L_COUNT(st) > 0.0) {
                        r_total += RLQ_L_COUNT(st) * agree;
                        r_min = rlq_l_min(r_min, lu);
                        n_ring += RLQ_L_COUNT(st);
                    }
                }
                const long long e = (t + 1) / eval_every - 1;
                const long long at = e * n_runs + r;
                const double ln10 = par[RLQ_L_LN10];
                out_agree_unique[at] = n_unique > 0 ? u_total / (double)n_unique : RLQ_L_NAN;
                out_log10_min_unique[at] = u_min / ln10;
                out_n_unique[at] = (double)n_unique;
                out_agree_odd[at] = n_odd > 0 ? o_total / (double)n_odd : RLQ_L_NAN;
                out_log10_min_odd[at] = o_min / ln10;
                out_agree_replay[at] = n_ring > 0.0 ? r_total / n_ring : RLQ_L_NAN;
                out_log10_min_replay[at] = r_min / ln10;
                out_quiet_floor_run[at] = (double)quiet_max;
                quiet_max = quiet_run;
                out_lambda[at] = v[RLQ_LAMBDA_SLOT];
                out_agree_mean[at] = total / (double)(n_visited > 1 ? n_visited : 1);
                out_log10_agree_min[at] = log_min / par[RLQ_L_LN10];
                out_kl_ema[at] = ema;
                out_episode_return[at] = win_ret / (win_done > 0.0 ? win_done : RLQ_L_NAN);
                win_ret = 0.0;
                win_done = 0.0;
            }
        }
#undef RLQ_L_Q
#undef RLQ_L_THETA
#undef RLQ_L_V
#undef RLQ_L_VISITED
#undef RLQ_L_RING
#undef RLQ_L_COUNT
    }
}

// The loop's exp and log on n values (the tests measure their error and compare the backends' bits).
extern "C" __global__ void rlq_learn_elementary(const double* x, double* exp_x, double* log_x, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        exp_x[i] = rlq_l_exp(x[i]);
        log_x[i] = rlq_l_log(x[i]);
    }
}
