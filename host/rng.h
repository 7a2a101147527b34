// host/rng.h: the one random number generator of valuepath (init, sampling).
//
// splitmix64: tiny, fast, and fully specified, so the same seed gives the same weights on every
// platform and in both the CPU and GPU builds (the init runs on the host in both). Its whole
// state is one uint64, which checkpoints store. std::mt19937 + std::normal_distribution would
// not do: the distributions are implementation-defined.
#pragma once

#include <cmath>
#include <cstdint>

struct Rng {
    uint64_t state;
};

inline void rng_init(Rng* r, uint64_t seed) { r->state = seed; }

// what each draw adds to the state: splitmix64's counter (rng_skip relies on it)
constexpr uint64_t RNG_STATE_STEP = 0x9E3779B97F4A7C15ull;

inline uint64_t rng_next_u64(Rng* r) {
    uint64_t z = (r->state += RNG_STATE_STEP);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// The state after n more draws of rng_next_u64, without making them: each draw adds the same
// constant to the state (splitmix64's counter), so n of them add n times it (mod 2^64). A sample
// cut short by a stop signal skips the draws of the tokens it did not draw, and the sample RNG that
// the checkpoint keeps is the one of a run whose sample ran whole.
inline void rng_skip(Rng* r, uint64_t n) { r->state += n * RNG_STATE_STEP; }

// uniform in [0, 1) with 53 random bits
inline double rng_uniform(Rng* r) { return (double)(rng_next_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

// standard normal by Box-Muller (one draw per call; the second is dropped to keep the state simple).
// Each call makes RNG_DRAWS_PER_NORMAL draws of rng_next_u64, so the n-th normal of a stream can be
// reached with rng_skip (init_params_from_seed draws a tensor's normals on several threads so).
constexpr uint64_t RNG_DRAWS_PER_NORMAL = 2;
inline double rng_normal(Rng* r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

// A generator derived from a seed and a stream id, so that independent uses (init, samples,
// data shuffling) never share a sequence: changing how many numbers one consumes cannot shift
// another.
inline Rng rng_stream(uint64_t seed, uint64_t stream) {
    Rng r;
    rng_init(&r, seed ^ (0xD1B54A32D192ED03ull * (stream + 1)));
    rng_next_u64(&r);
    return r;
}
