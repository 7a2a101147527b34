// host/utils.h: error reporting and checked I/O shared by every valuepath binary.
//
// Two kinds of failure, two exit codes, so that scripts can tell them apart:
//   usage_error(...)   -> exit 2: the command line is wrong (unknown flag, bad value, a config
//                         that does not fit). Nothing has been read or written yet.
//   runtime_error(...) -> exit 1: the inputs are wrong or the machine failed (corrupt shard,
//                         checkpoint of another shape, disk full). Checkpoints already on disk are
//                         never touched by the failing step (they are written atomically).
// Every message says what went wrong and, on a "HINT:" line, what to do about it.
#pragma once

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#define VP_EXIT_RUNTIME 1
#define VP_EXIT_USAGE 2

// The command that makes the data the README's examples train on, for the hints of errors about
// missing or wrong data (config.h, dataloader.h): one string, so the hints never disagree. A
// macro, so that it joins the literals around it.
#define VP_PREPARE_DATA_COMMAND ".venv/bin/python scripts/prepare_tinyshakespeare.py (after make venv)"

// In the test binaries an error must not kill the process: the tests check that bad inputs are
// refused. With VP_ERRORS_THROW defined, errors throw a VpError carrying the exit code instead.
#ifdef VP_ERRORS_THROW
#include <stdexcept>
struct VpError : std::runtime_error {
    int code;
    VpError(int c, const std::string& msg) : std::runtime_error(msg), code(c) {}
};
#endif

// An error raised while an ErrorCapture is alive is thrown as a CapturedError instead of ending
// the process, so that the caller can finish something first: the trainer reads a step's data
// under one, and when a training shard fails mid-run it saves the last completed step together
// with the other ranks before it reports and stops (host/train_loop.h). For the main thread's
// serial code only: an exception must not leave an OpenMP region. (A plain static, not
// thread_local: the CUDA emulator's race build, tests/emu, runs kernels on fibers.)
struct CapturedError {
    int code;
    std::string message, hint;
};
inline int& error_capture_depth() {
    static int depth = 0;
    return depth;
}
struct ErrorCapture {
    ErrorCapture() { error_capture_depth()++; }
    ~ErrorCapture() { error_capture_depth()--; }
    ErrorCapture(const ErrorCapture&) = delete;
    ErrorCapture& operator=(const ErrorCapture&) = delete;
};

// The first stop signal (SIGINT, SIGTERM, SIGUSR1, SIGHUP) the trainer received, 0 if none: set by the
// handler of host/train_loop.h, read by the step loop and by the evaluations (host/mc_eval.h),
// which end early on it. Here, below both, since an evaluation cannot include the loop.
inline volatile sig_atomic_t g_stop_signal = 0;

inline const char* stop_signal_name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : sig == SIGHUP ? "SIGHUP" : "a signal";
}

// For an evaluation's batch loop or a sample's token loop: whether to end it here. cut_short
// null: never (one that is not cut); else once a stop signal is pending, and *cut_short then says so.
inline bool stop_cuts_here(bool* cut_short) {
    if (!cut_short || !g_stop_signal) return false;
    *cut_short = true;
    return true;
}

// The message of an error as every binary prints it: "KIND: what", then "---> HINT: what to do".
inline void print_error(const char* kind, const char* hint, const char* msg) {
    fflush(stdout);
    fprintf(stderr, "%s: %s\n", kind, msg);
    if (hint && hint[0]) fprintf(stderr, "---> HINT: %s\n", hint);
    fflush(stderr);
}

// Ends the process after an error that print_error has already reported.
[[noreturn]] inline void exit_after_error(int code) {
#ifdef VP_ERRORS_THROW
    throw VpError(code, "the error printed above");
#else
    fflush(stdout);
    fflush(stderr);
    exit(code);
#endif
}

[[noreturn]] inline void vp_fail(int code, const char* kind, const char* hint, const char* fmt, va_list ap) {
    char msg[4096];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (error_capture_depth() > 0) throw CapturedError{code, msg, hint ? hint : ""};
#ifdef VP_ERRORS_THROW
    (void)kind; (void)hint;
    throw VpError(code, msg);
#else
    print_error(kind, hint, msg);
    exit_after_error(code);
#endif
}

// usage_error(hint, fmt, ...): exit 2. hint may be NULL; "run with --help" is the usual one.
[[noreturn]] inline void usage_error(const char* hint, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vp_fail(VP_EXIT_USAGE, "usage error", hint ? hint : "run with --help to see every flag and its default", fmt, ap);
}

// runtime_error(hint, fmt, ...): exit 1.
[[noreturn]] inline void runtime_error(const char* hint, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vp_fail(VP_EXIT_RUNTIME, "error", hint, fmt, ap);
}

// A decimal number as a person types it ("3e-4", "-0.5", ".1", "1E3"): true with *out set, false
// for anything else. strtod alone also takes hexadecimal ("0x10" is 16), "inf", "nan" and leading
// blanks, which a flag or an environment variable is never meant to hold: "--lr 0x10" would train
// at 16. Range checks are the caller's (a finite double may still be an infinite float).
inline bool parse_decimal_number(const char* s, double* out) {
    if (!s) return false;
    const char* p = s;
    if (*p == '+' || *p == '-') p++;
    bool digits = false;
    while (isdigit((unsigned char)*p)) p++, digits = true;
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) p++, digits = true;
    }
    if (!digits) return false;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!isdigit((unsigned char)*p)) return false;
        while (isdigit((unsigned char)*p)) p++;
    }
    if (*p) return false;
    char* end = nullptr;
    double v = strtod(s, &end);  // the grammar above is a subset of strtod's: it reads all of s
    if (*end) return false;
    *out = v;
    return true;
}

// An integer as a person types it ("12", "-3", or "1e6" where exact): true with *out set, false for
// anything else (blanks, hexadecimal, "12abc", "2.5"). Every integer flag goes through it, the
// value paths' included, so one spelling is accepted everywhere.
inline bool parse_long_strict(const char* s, long* out) {
    if (!s || !*s) return false;
    char* end = nullptr;
    errno = 0;
    if (isspace((unsigned char)*s)) return false;  // strtol skips blanks: " 5" is not typed on purpose
    long v = strtol(s, &end, 10);
    if (*end == 'e' || *end == 'E' || *end == '.') {  // allow "1e6"-style integers if exact
        double as_double = 0;
        if (!parse_decimal_number(s, &as_double) || as_double != floor(as_double) || fabs(as_double) > 9e18) return false;
        *out = (long)as_double;
        return true;
    }
    if (*end || errno) return false;
    *out = v;
    return true;
}

// A number from the environment variable `name` (the few settings that are not flags: see
// docs/distributed.md and docs/gpu.md): `fallback` when it is unset or empty; a usage error that
// names the variable and the range when it is not a number in [lo, hi], so a typo never silently
// turns a setting off.
inline double env_number(const char* name, double fallback, double lo, double hi) {
    const char* e = getenv(name);
    if (!e || !*e) return fallback;
    errno = 0;
    double v = 0;
    if (!parse_decimal_number(e, &v) || errno == ERANGE || !(v >= lo && v <= hi)) {
        char hint[160];
        snprintf(hint, sizeof(hint), "set %s to a number from %g to %g, or unset it", name, lo, hi);
        usage_error(hint, "%s='%s' is not a number from %g to %g", name, e, lo, hi);
    }
    return v;
}

// ----------------------------------------------------------------------------
// checked file I/O: every failure names the file and says what to do

inline FILE* fopen_check(const char* path, const char* mode, const char* hint = nullptr) {
    FILE* f = fopen(path, mode);
    if (!f) runtime_error(hint, "cannot open '%s' (mode %s): %s", path, mode, strerror(errno));
    return f;
}

// Fails unless `path` is a regular file (not a directory, FIFO or device: fopen succeeds on a
// directory and blocks on a FIFO) of at most max_bytes. `what` names the file in the message.
inline void require_regular_file(const char* path, const char* what, const char* hint, uint64_t max_bytes = UINT64_MAX) {
    struct stat st;
    if (stat(path, &st) != 0) runtime_error(hint, "cannot open %s '%s': %s", what, path, strerror(errno));
    if (!S_ISREG(st.st_mode)) runtime_error(hint, "%s '%s' is not a regular file (%s)", what, path, S_ISDIR(st.st_mode) ? "a directory" : "a pipe or device");
    if ((uint64_t)st.st_size > max_bytes)
        runtime_error(hint, "%s '%s' is %llu bytes, more than the %llu a %s can be", what, path, (unsigned long long)st.st_size, (unsigned long long)max_bytes, what);
}

// Reads exactly n items or fails, naming the file, so a truncated file never yields garbage.
inline void fread_check(void* dst, size_t size, size_t n, FILE* f, const char* path) {
    size_t got = fread(dst, size, n, f);
    if (got != n) {
        runtime_error("the file is truncated or corrupt; re-create it (re-run the script that wrote it)",
                      "'%s': expected %zu items of %zu bytes, read %zu (%s)", path, n, size, got,
                      feof(f) ? "unexpected end of file" : strerror(errno));
    }
}

inline void fwrite_check(const void* src, size_t size, size_t n, FILE* f, const char* path) {
    size_t put = fwrite(src, size, n, f);
    if (put != n) {
        runtime_error("is the disk full? free some space and run again; earlier checkpoints are intact",
                      "writing '%s' failed after %zu of %zu items: %s", path, put, n, strerror(errno));
    }
}

// A byte count for messages, in the largest binary unit that keeps it >= 1: "2.500 GiB",
// "416.2 MiB", "12.0 KiB", "512 bytes" (a GiB figure with three decimals would print a small
// model's 0.4 MiB as "0.000 GiB").
inline std::string human_bytes(size_t bytes) {
    char buf[64];
    if (bytes >= (1ull << 30)) snprintf(buf, sizeof(buf), "%.3f GiB", bytes / 1073741824.0);
    else if (bytes >= (1ull << 20)) snprintf(buf, sizeof(buf), "%.1f MiB", bytes / 1048576.0);
    else if (bytes >= (1ull << 10)) snprintf(buf, sizeof(buf), "%.1f KiB", bytes / 1024.0);
    else snprintf(buf, sizeof(buf), "%zu bytes", bytes);
    return buf;
}

inline void* malloc_check(size_t bytes, const char* what) {
    void* p = malloc(bytes ? bytes : 1);
    if (!p) runtime_error("use a smaller --batch-size, --seq-len or model", "out of memory allocating %zu bytes for %s", bytes, what);
    return p;
}

inline void* calloc_check(size_t n, size_t size, const char* what) {
    void* p = calloc(n ? n : 1, size ? size : 1);
    if (!p) runtime_error("use a smaller --batch-size, --seq-len or model", "out of memory allocating %zu x %zu bytes for %s", n, size, what);
    return p;
}

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
