// host/schedule.h: the learning-rate schedule, linear warmup then cosine decay.
#pragma once

#include <cmath>

// lr at optimizer step `step` (0-based: the step about to be taken), for a run of max_steps:
//   step <  warmup: lr * (step + 1) / warmup               (never exactly 0 on the first step)
//   step >= warmup: cosine from lr down to lr * min_frac, reached at step == max_steps
// Same shape as nanoGPT's get_lr, with the decay spanning the whole run after warmup.
inline float lr_at_step(int step, float lr, int warmup, int max_steps, float min_frac) {
    if (step < warmup) return lr * (float)(step + 1) / (float)warmup;
    float min_lr = lr * min_frac;
    if (max_steps <= warmup) return lr;
    double ratio = (double)(step - warmup) / (double)(max_steps - warmup);
    if (ratio > 1.0) ratio = 1.0;
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio));  // 1 -> 0
    return (float)(min_lr + coeff * (lr - min_lr));
}
