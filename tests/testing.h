// tests/testing.h: the tiny test harness every C++ test binary of valuepath uses.
//
// A test is a function registered with TEST(name). Inside it, CHECK(cond, fmt, ...) records a
// failure with a message and goes on; REQUIRE(cond, ...) records and returns from the test.
// main() comes from TEST_MAIN(): it runs every test (or those whose name contains one of the
// comma-separated parts of argv[1]), prints "PASS name (seconds)" or "FAIL name (seconds)" and
// why, then the closing line "N passed, N failed" (", N skipped" added when a test skipped), and
// exits 1 if anything failed, so neither CI nor tests/run_all.sh can miss a failure. A filter that
// matches no test fails too. A test that cannot run here (the hardware it needs is absent) calls
// SKIP_TEST(fmt, ...): it prints "SKIP name: why" and counts as skipped, not passed, so that a
// pass always means that something was checked.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

struct TestCase {
    const char* name;
    std::function<void()> fn;  // (a std::function, so that a suite can add tests at run time: one per file)
};

inline std::vector<TestCase>& test_registry() {
    static std::vector<TestCase> tests;
    return tests;
}

struct TestRegistrar {
    TestRegistrar(const char* name, void (*fn)()) { test_registry().push_back({name, fn}); }
};

// Failure messages of the test that is running now.
inline std::vector<std::string>& test_failures() {
    static std::vector<std::string> failures;
    return failures;
}

inline void test_fail(const char* file, int line, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
inline void test_fail(const char* file, int line, const char* fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    char full[2300];
    snprintf(full, sizeof(full), "%s:%d: %s", file, line, msg);
    test_failures().push_back(full);
}

// Why the test that is running now skipped itself ("" while it has not).
inline std::string& test_skip_reason() {
    static std::string reason;
    return reason;
}

#define SKIP_TEST(...)                                             \
    do {                                                           \
        char skip_why_[512];                                       \
        snprintf(skip_why_, sizeof(skip_why_), __VA_ARGS__);       \
        test_skip_reason() = skip_why_;                            \
        return;                                                    \
    } while (0)

#define TEST(name)                                             \
    static void name();                                        \
    static TestRegistrar name##_registrar(#name, name);        \
    static void name()

#define CHECK(cond, ...)                                                         \
    do {                                                                         \
        if (!(cond)) test_fail(__FILE__, __LINE__, "CHECK(" #cond ") " __VA_ARGS__); \
    } while (0)

#define REQUIRE(cond, ...)                                                       \
    do {                                                                         \
        if (!(cond)) {                                                           \
            test_fail(__FILE__, __LINE__, "REQUIRE(" #cond ") " __VA_ARGS__);   \
            return;                                                              \
        }                                                                        \
    } while (0)

// Relative-or-absolute closeness: |a-b| <= atol + rtol*|b|. b is the reference.
inline bool close_enough(double a, double b, double atol, double rtol) {
    if (std::isnan(a) || std::isnan(b)) return false;
    return std::fabs(a - b) <= atol + rtol * std::fabs(b);
}

inline int run_registered_tests(int argc, char** argv) {
    // argv[1]: run only the tests whose name contains one of its comma-separated parts
    std::vector<std::string> filters;
    for (const char* p = argc > 1 ? argv[1] : nullptr; p && *p;) {
        const char* comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len) filters.emplace_back(p, len);
        p = comma ? comma + 1 : p + len;
    }
    int passed = 0, failed = 0, skipped = 0;
    for (const TestCase& t : test_registry()) {
        bool selected = filters.empty();
        for (const std::string& f : filters) selected |= strstr(t.name, f.c_str()) != nullptr;
        if (!selected) continue;
        test_failures().clear();
        test_skip_reason().clear();
        fflush(stdout);
        auto t0 = std::chrono::steady_clock::now();
#ifdef VP_ERRORS_THROW
        try {
            t.fn();
        } catch (const std::exception& e) {
            test_failures().push_back(std::string("uncaught exception: ") + e.what());
        }
#else
        t.fn();
#endif
        // seconds per test: what CI's time budget is spent on (make test's suites print theirs)
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (test_failures().empty() && !test_skip_reason().empty()) {  // (a check that failed before the skip still fails it)
            printf("SKIP %s: %s\n", t.name, test_skip_reason().c_str());
            skipped++;
        } else if (test_failures().empty()) {
            printf("PASS %s (%.1f s)\n", t.name, secs);
            passed++;
        } else {
            printf("FAIL %s (%.1f s)\n", t.name, secs);
            for (const std::string& f : test_failures()) printf("     %s\n", f.c_str());
            failed++;
        }
        fflush(stdout);
    }
    // a filter that selects nothing (a misspelt test name) must not read as a pass: "0 passed,
    // 0 failed" with exit 0 would hide that the test meant was never run
    if (!filters.empty() && passed + failed + skipped == 0) {
        printf("FAIL no test's name contains '%s'; the tests are:\n", argv[1]);
        for (const TestCase& t : test_registry()) printf("     %s\n", t.name);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    if (skipped) printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    else printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#define TEST_MAIN() \
    int main(int argc, char** argv) { return run_registered_tests(argc, argv); }
