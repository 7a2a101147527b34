// host/update_guard.h: skip the optimizer update of a step whose loss or gradient norm is an
// outlier against the recent steps (llm.c's -sl / -sg). PaLM's remedy for a spike was heavier:
// restart from a checkpoint before it and skip the few hundred batches around it. This leaves out
// only the outlier step's own update, without a restart.
//
// Off by default. --skip-loss-z Z skips a step whose loss is more than Z standard deviations above
// the recent mean, --skip-norm-z Z the same for the gradient norm (before clipping). A skipped
// step still consumes its batch and advances the step count and the lr schedule (as llm.c's);
// only the AdamW update is left out, so weights and moments stay as the step before left them.
//
// "Recent" is an exponentially weighted mean and variance, weight 1/min(n, W) for the n-th value
// and W = --skip-window: for the first W values that is the plain mean and population variance of
// all of them (Welford's update), after that an exponential average of time constant about W
// steps. Four doubles instead of llm.c's ring of 2 x 128 values, so that the whole state fits in
// the checkpoint header (host/checkpoint.h) and --resume stays bit-exact. No step is judged before
// W values have been seen (the first steps of a run move too fast for a mean to mean anything).
// Every step's values enter the statistics, skipped or not: a level that moves for good (new
// data, a changed lr) is absorbed within about W steps instead of skipping updates forever.
// The loss and norm are the ones every rank sees after the all-reduce, so under data parallelism
// every rank takes the same decision.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <type_traits>

struct UpdateGuardState {  // 48 bytes, stored raw in the checkpoint header; all zero = a fresh run
    int64_t seen;          // steps whose values entered the statistics
    int64_t skipped;       // updates skipped so far in the run
    double loss_mean, loss_var, norm_mean, norm_var;
};
static_assert(sizeof(UpdateGuardState) == 48 && std::is_trivially_copyable<UpdateGuardState>::value,
              "UpdateGuardState is part of the checkpoint header's layout");

struct UpdateGuardSettings {
    double loss_z = 0, norm_z = 0;  // thresholds; 0 = that test is off
    int window = 128;               // W
    bool enabled() const { return loss_z > 0 || norm_z > 0; }
};

struct UpdateGuardVerdict {
    bool judged = false;          // W values seen before this step, so z means something
    double loss_z = 0, norm_z = 0;
    bool skip_for_loss = false, skip_for_norm = false;
    bool skip() const { return skip_for_loss || skip_for_norm; }
};

// z of x against a mean and variance; 0 where the variance is 0 (every earlier value equal: no
// basis to call anything an outlier)
inline double update_guard_z(double x, double mean, double var) { return var > 0 ? (x - mean) / std::sqrt(var) : 0.0; }

// the statistics with x added at weight a = 1/min(n, W): mean += a (x - mean),
// var = (1 - a) (var + a (x - mean_old)^2), which for a = 1/n is the population variance exactly
inline void update_guard_observe(double x, int64_t n, int window, double* mean, double* var) {
    double a = 1.0 / (double)(n < window ? n : window);
    double d = x - *mean;
    *mean += a * d;
    *var = (1.0 - a) * (*var + a * d * d);
}

// Judges this step's loss and norm against the earlier steps, then adds them to the statistics.
inline UpdateGuardVerdict update_guard_step(UpdateGuardState* s, const UpdateGuardSettings& g, double loss, double norm) {
    UpdateGuardVerdict v;
    v.judged = s->seen >= g.window;
    if (v.judged) {
        v.loss_z = update_guard_z(loss, s->loss_mean, s->loss_var);
        v.norm_z = update_guard_z(norm, s->norm_mean, s->norm_var);
        v.skip_for_loss = g.loss_z > 0 && v.loss_z > g.loss_z;
        v.skip_for_norm = g.norm_z > 0 && v.norm_z > g.norm_z;
    }
    s->seen++;
    update_guard_observe(loss, s->seen, g.window, &s->loss_mean, &s->loss_var);
    update_guard_observe(norm, s->seen, g.window, &s->norm_mean, &s->norm_var);
    if (v.skip()) s->skipped++;
    return v;
}

// The console's line for a skipped update, e.g. "step   359: update skipped: loss 3.343226 is 3.3 sd
// above the recent mean 1.233663 (--skip-loss-z 3)"
inline void update_guard_print(int step, const UpdateGuardVerdict& v, const UpdateGuardSettings& g, double loss, double norm,
                               const UpdateGuardState& before) {
    printf("step %5d: update skipped:", step);
    if (v.skip_for_loss)
        printf(" loss %.6f is %.1f sd above the recent mean %.6f (--skip-loss-z %g)", loss, v.loss_z, before.loss_mean, g.loss_z);
    if (v.skip_for_norm)
        printf("%s gradient norm %.4f is %.1f sd above the recent mean %.4f (--skip-norm-z %g)", v.skip_for_loss ? ";" : "", norm, v.norm_z,
               before.norm_mean, g.norm_z);
    printf("\n");
    fflush(stdout);
}
