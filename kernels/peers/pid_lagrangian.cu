// pid_lagrangian.cu — the PID Lagrangian multiplier of Stooke, Achiam & Abbeel
// (ICML 2020, arXiv:2007.03964) as rlpyt ships it, as a one-thread ISV
// controller: the cost penalty in slot 486 (λ), the constraint value the KL
// EMA (slot 488), the cost limit the KL target (slot 491).
//
// Source: astooke/rlpyt at 2f2126f, rlpyt/projects/safe/cppo_pid.py,
// CppoPID.optimize_agent ("PID update here"), state set in
// CppoPID.initialize, defaults in CppoPID.__init__ (pid_Kp=0, pid_Ki=1,
// pid_Kd=0, pid_d_delay=10, pid_delta_p_ema_alpha=0.95,
// pid_delta_d_ema_alpha=0.95, penalty_init=1., sum_norm=True). OmniSafe's
// port (PKU-Alignment/omnisafe at 1a99b20, omnisafe/common/pid_lagrange.py,
// PIDLagrangian.pid_update) has the same update. Per step:
//   delta = float(ep_cost_avg - self.cost_limit)
//   self.pid_i = max(0., self.pid_i + delta * self.pid_Ki)
//   self._delta_p *= a_p; self._delta_p += (1 - a_p) * delta
//   self._cost_d *= a_d;  self._cost_d += (1 - a_d) * float(ep_cost_avg)
//   pid_d = max(0., self._cost_d - self.cost_ds[0])
//   pid_o = (self.pid_Kp * self._delta_p + self.pid_i + self.pid_Kd * pid_d)
//   self.cost_penalty = max(0., pid_o)      (sum_norm: no penalty_max)
//   self.cost_ds.append(self._cost_d)       (deque(maxlen=pid_d_delay), [0] at start)
//
// Arithmetic as the source runs it: Python floats (double). Python's
// max(0., x) keeps 0. unless x > 0. (a NaN gives 0., as does -0.), written
// here as that comparison. The ISV holds float32: every state value is
// rounded once to its float32 slot per step (Python keeps 53 bits; these
// slots cannot). The deque of the last pid_d_delay values of _cost_d is a
// ring of D_DELAY slots with its read/write position in a slot of its own:
// at update t the ring's slot t mod D_DELAY holds _cost_d of update
// t - D_DELAY (0 for the first D_DELAY updates, the deque's initial 0).
// Only the slot layout is this suite's; the contract declares the state
// slots ([pid_lagrangian.state.*]) and their start values (initialize():
// pid_i = penalty_init, _delta_p = 0, _cost_d = 0, cost_ds = [0]).

#define PID_LAMBDA_INDEX 486
#define PID_KL_INDEX 488
#define PID_LIMIT_INDEX 491
#define PID_I_INDEX 492
#define PID_DELTA_P_INDEX 493
#define PID_COST_D_INDEX 494
#define PID_RING_POS_INDEX 495
#define PID_RING_INDEX 496

#define PID_KP 0.0
#define PID_KI 1.0
#define PID_KD 0.0
#define PID_D_DELAY 10
#define PID_DELTA_P_EMA_ALPHA 0.95
#define PID_DELTA_D_EMA_ALPHA 0.95

__device__ __forceinline__ double py_max0(double x) { return x > 0.0 ? x : 0.0; }

extern "C" __global__ void pid_lagrangian_update(float* __restrict__ isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;

    const double ep_cost_avg = isv[PID_KL_INDEX];
    const double cost_limit = isv[PID_LIMIT_INDEX];
    double pid_i = isv[PID_I_INDEX];
    double delta_p = isv[PID_DELTA_P_INDEX];
    double cost_d = isv[PID_COST_D_INDEX];
    const float at = isv[PID_RING_POS_INDEX];
    // the harness seeds the position; a value outside the ring (never written by this kernel) reads slot 0
    const int pos = (at >= 0.0f && at < (float)PID_D_DELAY) ? (int)at : 0;

    const double delta = ep_cost_avg - cost_limit;
    pid_i = py_max0(pid_i + delta * PID_KI);
    const double a_p = PID_DELTA_P_EMA_ALPHA;
    delta_p *= a_p;
    delta_p += (1 - a_p) * delta;
    const double a_d = PID_DELTA_D_EMA_ALPHA;
    cost_d *= a_d;
    cost_d += (1 - a_d) * ep_cost_avg;
    const double pid_d = py_max0(cost_d - (double)isv[PID_RING_INDEX + pos]);
    const double pid_o = PID_KP * delta_p + pid_i + PID_KD * pid_d;
    const double cost_penalty = py_max0(pid_o);

    isv[PID_I_INDEX] = (float)pid_i;
    isv[PID_DELTA_P_INDEX] = (float)delta_p;
    isv[PID_COST_D_INDEX] = (float)cost_d;
    isv[PID_RING_INDEX + pos] = (float)cost_d;
    isv[PID_RING_POS_INDEX] = (float)((pos + 1) % PID_D_DELAY);
    isv[PID_LAMBDA_INDEX] = (float)cost_penalty;
}
