// host/schedule.h: the learning-rate schedule: linear warmup, then one of four shapes
// (--lr-schedule): cosine (the default), linear, wsd (warmup-stable-decay) or constant.
#pragma once

#include <cmath>
#include <cstring>

enum LrShape : int { LR_COSINE = 0, LR_LINEAR = 1, LR_WSD = 2, LR_CONSTANT = 3 };

inline const char* lr_shape_name(LrShape s) {
    switch (s) {
        case LR_COSINE: return "cosine";
        case LR_LINEAR: return "linear";
        case LR_WSD: return "wsd";
        case LR_CONSTANT: return "constant";
    }
    return "?";
}

// false for a name that is none of the four
inline bool lr_shape_from_name(const char* name, LrShape* out) {
    for (LrShape s : {LR_COSINE, LR_LINEAR, LR_WSD, LR_CONSTANT})
        if (!strcmp(name, lr_shape_name(s))) {
            *out = s;
            return true;
        }
    return false;
}

struct LrSchedule {
    LrShape shape;
    float lr;             // the peak, --lr
    int warmup;           // --warmup-steps
    int max_steps;        // the decay ends here
    float min_frac;       // the decay ends at lr * min_frac (cosine, linear, wsd)
    float cooldown_frac;  // wsd: the last cooldown_frac of the steps after warmup decay linearly
};

// lr at optimizer step `step` (0-based: the step about to be taken). With n = max_steps - warmup
// and t = step - warmup:
//   step < warmup:  lr * (step + 1) / warmup                 (never exactly 0 on the first step)
//   cosine:         min + (lr - min) * (1 + cos(pi * t / n)) / 2
//   linear:         min + (lr - min) * (1 - t / n)
//   wsd:            lr until t = n - d, then min + (lr - min) * (1 - (t - (n - d)) / d), d = cooldown_frac * n
//                   (d = 0: constant)
//   constant:       lr
// min = lr * min_frac; each decay reaches min at step == max_steps and stays there after it (a run
// extended on resume). Cosine is nanoGPT's get_lr with the decay spanning the whole run after
// warmup; wsd is the warmup-stable-decay ("trapezoidal") schedule of MiniCPM and modded-nanogpt,
// whose stable-phase checkpoints can be cooled down later. PyTorch: LambdaLR with the same lambda.
inline float lr_at(const LrSchedule& s, int step) {
    if (step < s.warmup) return s.lr * (float)(step + 1) / (float)s.warmup;
    if (s.shape == LR_CONSTANT || s.max_steps <= s.warmup) return s.lr;
    double n = (double)s.max_steps - s.warmup, t = (double)step - s.warmup;
    float min_lr = s.lr * s.min_frac;  // in float, as every earlier version computed it: resumes stay bit-exact
    double ratio = t / n;  // how far into the decay, 0 -> 1
    if (s.shape == LR_WSD) {
        double cooldown = (double)s.cooldown_frac * n;
        if (cooldown <= 0 || t < n - cooldown) return s.lr;
        ratio = (t - (n - cooldown)) / cooldown;
    }
    if (ratio > 1.0) ratio = 1.0;
    double coeff = s.shape == LR_COSINE ? 0.5 * (1.0 + cos(M_PI * ratio)) : 1.0 - ratio;  // 1 -> 0
    return (float)(min_lr + coeff * (s.lr - min_lr));
}

// The cosine schedule: what the reference states (tests/reference_states/) were made with.
inline float lr_at_step(int step, float lr, int warmup, int max_steps, float min_frac) {
    return lr_at(LrSchedule{LR_COSINE, lr, warmup, max_steps, min_frac, 0.0f}, step);
}
