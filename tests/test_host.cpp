// tests/test_host.cpp: the host-side data path: token shards (host/dataloader.h), the
// tokenizer that prints samples and encodes prompts (host/tokenizer.h), multiple-choice files (host/mc_eval.h),
// and the shard layout of data-parallel
// training and its pieces (host/distributed.h dist_shard, dist_piece_part), the CRC-32 of checkpoints (host/crc32.h), and the
// outlier statistics of --skip-loss-z / --skip-norm-z (host/update_guard.h).
// Build (errors throw VpError so bad inputs can be checked):
//   g++ -O2 -std=c++17 -DVP_ERRORS_THROW -I. tests/test_host.cpp -o /tmp/test_host && /tmp/test_host
// The fixture shards and tokenizer files are written into a fresh mkdtemp directory. The GPT-2
// encoder.json test reads the shared data copy (VP_DATA_DIR, else shared/data or /work/shared/data).
#include <array>
#include "host/checkpoint.h"
#include "host/crc32.h"
#include "host/dataloader.h"
#include "host/distributed.h"
#include "host/mc_eval.h"
#include "host/params.h"
#include "host/rng.h"
#include "host/tokenizer.h"
#include "host/update_guard.h"
#include "tests/testing.h"

#include <sched.h>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

// ----------------------------------------------------------------------------
// fixtures

static std::vector<std::string>& created_files() {
    static std::vector<std::string> files;
    return files;
}

static void cleanup_tmp();

// The per-run temp dir, created on first use and removed at exit.
static const std::string& tmp_dir() {
    static std::string dir;
    if (dir.empty()) {
        char templ[] = "/tmp/vp_test_host_XXXXXX";
        char* d = mkdtemp(templ);
        if (!d) { perror("mkdtemp"); exit(1); }
        dir = d;
        created_files();  // construct it before registering, so it is destroyed after cleanup_tmp runs
        atexit(cleanup_tmp);
    }
    return dir;
}

static void cleanup_tmp() {
    for (const std::string& f : created_files()) remove(f.c_str());
    rmdir(tmp_dir().c_str());
}

static std::string tmp_path(const std::string& name) {
    std::string p = tmp_dir() + "/" + name;
    created_files().push_back(p);
    return p;
}

static void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
    FILE* f = fopen(path.c_str(), "wb");
    if (!f) { perror(path.c_str()); exit(1); }
    if (!bytes.empty()) fwrite(bytes.data(), 1, bytes.size(), f);
    fclose(f);
}

static void put_le32(std::vector<unsigned char>& b, uint32_t v) {
    for (int k = 0; k < 4; k++) b.push_back((unsigned char)(v >> (8 * k)));
}

// The bytes of a shard: header (magic, version, header_n) then tokens at the version's width
// (v1: uint16, anything else: uint32). header_n = -1 means tokens.size().
static std::vector<unsigned char> shard_bytes(const std::vector<uint32_t>& tokens, int version, int32_t magic = SHARD_MAGIC, int64_t header_n = -1) {
    std::vector<unsigned char> b;
    put_le32(b, (uint32_t)magic);
    put_le32(b, (uint32_t)version);
    put_le32(b, (uint32_t)(header_n < 0 ? (int64_t)tokens.size() : header_n));
    while (b.size() < SHARD_HEADER_BYTES) b.push_back(0);
    for (uint32_t t : tokens) {
        b.push_back((unsigned char)t);
        b.push_back((unsigned char)(t >> 8));
        if (version != 1) {
            b.push_back((unsigned char)(t >> 16));
            b.push_back((unsigned char)(t >> 24));
        }
    }
    return b;
}

static std::string write_shard(const std::string& name, const std::vector<uint32_t>& tokens, int version) {
    std::string p = tmp_path(name);
    write_bytes(p, shard_bytes(tokens, version));
    return p;
}

// tokens base, base+1, ..., base+n-1: every token is unique, so a sequence is identified by its first.
static std::vector<uint32_t> iota_tokens(uint32_t base, int n) {
    std::vector<uint32_t> t(n);
    for (int i = 0; i < n; i++) t[i] = base + (uint32_t)i;
    return t;
}

struct ErrInfo {
    int code;  // 0: no error
    std::string msg;
};

// Runs f and returns the VpError it threw (code 0 if none).
template <typename F>
static ErrInfo catch_error(F f) {
    try {
        f();
    } catch (const VpError& e) {
        return {e.code, e.what()};
    }
    return {0, ""};
}

static bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Reads `nbatches` batches, returning the concatenated inputs and targets.
static void read_batches(DataLoader* dl, int nbatches, std::vector<int>& in, std::vector<int>& tg) {
    size_t bt = (size_t)dl->B * dl->T;
    in.assign(bt * nbatches, -1);
    tg.assign(bt * nbatches, -1);
    for (int i = 0; i < nbatches; i++) dataloader_next_batch(dl, in.data() + i * bt, tg.data() + i * bt);
}

// ----------------------------------------------------------------------------
// data loader: stream contents

// ----------------------------------------------------------------------------
// CRC-32 (the checkpoints' checksums)

// The CRC one bit at a time, straight from the definition (reflected polynomial 0xEDB88320,
// initial value and final xor 0xFFFFFFFF): the reference for the table-driven code.
static uint32_t crc32_bitwise(const unsigned char* p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
    }
    return ~c;
}

TEST(crc32_matches_the_definition) {
    // the standard check value of CRC-32/ISO-HDLC (zlib.crc32(b"123456789"))
    CHECK(crc32_update(0, "123456789", 9) == 0xCBF43926u, "%08x", crc32_update(0, "123456789", 9));
    CHECK(crc32_update(0, "", 0) == 0, "empty input");
    std::vector<unsigned char> buf(1000);
    Rng rng;
    rng_init(&rng, 12345);
    for (auto& b : buf) b = (unsigned char)(rng_next_u64(&rng) >> 56);
    // every length (the 8-byte loop, its tail) and every start offset (unaligned loads)
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n + off <= 200; n++)
            CHECK(crc32_update(0, buf.data() + off, n) == crc32_bitwise(buf.data() + off, n), "off %zu n %zu", off, n);
    // chaining: the CRC of a + b from the CRC of a, as the checkpoint writer and zlib.crc32 do
    for (size_t cut : {0, 1, 7, 8, 9, 500, 999, 1000})
        CHECK(crc32_update(crc32_update(0, buf.data(), cut), buf.data() + cut, 1000 - cut) == crc32_bitwise(buf.data(), 1000), "cut %zu", cut);
    // every single-bit flip changes it
    uint32_t whole = crc32_update(0, buf.data(), buf.size());
    for (size_t bit = 0; bit < 8 * buf.size(); bit += 13) {
        buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        CHECK(crc32_update(0, buf.data(), buf.size()) != whole, "bit %zu", bit);
        buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    }
}

TEST(shard_v1_round_trip) {
    // 5 full sequences of T=4 (21 tokens needed) plus 3 tokens that make no full sequence
    const int T = 4, B = 2;
    std::vector<uint32_t> toks;
    for (int i = 0; i < 24; i++) toks.push_back((uint32_t)((i * 7919) % 65536));  // spans the uint16 range
    toks[3] = 65535;
    std::string p = write_shard("v1_00.bin", toks, 1);
    DataLoader dl;
    dataloader_init(&dl, p.c_str(), B, T, 65536, false, 0, 0, 1);
    CHECK(dataloader_num_tokens(&dl) == 24, "num_tokens %zu", dataloader_num_tokens(&dl));
    std::vector<int> in, tg;
    read_batches(&dl, 5, in, tg);  // 10 sequences = 2 epochs of 5
    for (int s = 0; s < 10; s++) {
        int seq = s % 5;
        for (int t = 0; t < T; t++) {
            CHECK(in[s * T + t] == (int)toks[seq * T + t], "input seq %d t %d: %d vs %u", s, t, in[s * T + t], toks[seq * T + t]);
            CHECK(tg[s * T + t] == (int)toks[seq * T + t + 1], "target seq %d t %d", s, t);
        }
    }
    dataloader_free(&dl);
}

TEST(shard_v2_round_trip) {
    const int T = 8, B = 3;
    std::vector<uint32_t> toks;
    for (int i = 0; i < 8 * 6 + 1; i++) toks.push_back(65530u + (uint32_t)i * 1000u);  // beyond uint16
    std::string p = write_shard("v2_00.bin", toks, 2);
    DataLoader dl;
    dataloader_init(&dl, p.c_str(), B, T, 200000, false, 0, 0, 1);
    std::vector<int> in, tg;
    read_batches(&dl, 2, in, tg);
    for (int s = 0; s < 6; s++)
        for (int t = 0; t < T; t++) {
            CHECK(in[s * T + t] == (int)toks[s * T + t], "input seq %d t %d", s, t);
            CHECK(tg[s * T + t] == (int)toks[s * T + t + 1], "target seq %d t %d", s, t);
        }
    dataloader_free(&dl);
}

// Three shards of 3, 2 and 4 sequences (T=4), mixed versions; returns the glob.
static std::string three_shards(const std::string& prefix) {
    write_shard(prefix + "_000.bin", iota_tokens(1000, 4 * 3 + 2), 1);
    write_shard(prefix + "_001.bin", iota_tokens(2000, 4 * 2 + 1), 2);
    write_shard(prefix + "_002.bin", iota_tokens(3000, 4 * 4 + 4), 1);
    return tmp_dir() + "/" + prefix + "_*.bin";
}

TEST(batches_cross_shard_boundaries) {
    std::string g = three_shards("cross");
    // the expected stream: first tokens of every sequence, shards in order, wrapping forever
    std::vector<int> firsts;
    for (int s = 0; s < 3; s++) firsts.push_back(1000 + 4 * s);
    for (int s = 0; s < 2; s++) firsts.push_back(2000 + 4 * s);
    for (int s = 0; s < 4; s++) firsts.push_back(3000 + 4 * s);
    DataLoader dl;
    dataloader_init(&dl, g.c_str(), 4, 4, 5000, false, 0, 0, 1);
    CHECK(dataloader_num_tokens(&dl) == 14 + 9 + 20, "num_tokens %zu", dataloader_num_tokens(&dl));
    std::vector<int> in, tg;
    read_batches(&dl, 7, in, tg);  // 28 sequences: 3 epochs and a bit, batches straddle shards and epochs
    for (int s = 0; s < 28; s++)
        for (int t = 0; t < 4; t++) {
            int want = firsts[s % 9] + t;
            CHECK(in[s * 4 + t] == want, "seq %d t %d: %d vs %d", s, t, in[s * 4 + t], want);
            CHECK(tg[s * 4 + t] == want + 1, "target seq %d t %d", s, t);
        }
    // reset goes back to the very start
    dataloader_reset(&dl);
    std::vector<int> in2, tg2;
    read_batches(&dl, 7, in2, tg2);
    CHECK(in2 == in && tg2 == tg, "reset must replay the same stream");
    dataloader_free(&dl);
}

// The first token of each of `nseq` sequences read one by one (B=1), with targets checked.
static std::vector<int> read_firsts(DataLoader* dl, int nseq, bool* consistent) {
    std::vector<int> firsts;
    std::vector<int> in(dl->B * dl->T), tg(dl->B * dl->T);
    *consistent = true;
    while ((int)firsts.size() < nseq) {
        dataloader_next_batch(dl, in.data(), tg.data());
        for (int b = 0; b < dl->B; b++) {
            firsts.push_back(in[b * dl->T]);
            for (int t = 0; t < dl->T; t++) {
                if (in[b * dl->T + t] != firsts.back() + t || tg[b * dl->T + t] != firsts.back() + t + 1) *consistent = false;
            }
        }
    }
    return firsts;
}

TEST(shuffle_permutes_each_epoch) {
    // more sequences, so that two different permutations coincide with negligible probability
    write_shard("shuf_000.bin", iota_tokens(10000, 4 * 40 + 1), 1);
    write_shard("shuf_001.bin", iota_tokens(20000, 4 * 25 + 3), 2);
    write_shard("shuf_002.bin", iota_tokens(30000, 4 * 33 + 1), 1);
    std::string g = tmp_dir() + "/shuf_*.bin";
    const int S = 40 + 25 + 33;
    std::set<int> all;
    for (int s = 0; s < 40; s++) all.insert(10000 + 4 * s);
    for (int s = 0; s < 25; s++) all.insert(20000 + 4 * s);
    for (int s = 0; s < 33; s++) all.insert(30000 + 4 * s);

    DataLoader a, b, c;
    dataloader_init(&a, g.c_str(), 2, 4, 40000, true, 1337, 0, 1);
    dataloader_init(&b, g.c_str(), 2, 4, 40000, true, 1337, 0, 1);
    dataloader_init(&c, g.c_str(), 2, 4, 40000, true, 42, 0, 1);
    bool ok_a, ok_b, ok_c;
    std::vector<int> fa = read_firsts(&a, 3 * S, &ok_a);  // S is even: B=2 batches end exactly at each epoch
    std::vector<int> fb = read_firsts(&b, 3 * S, &ok_b);
    std::vector<int> fc = read_firsts(&c, 3 * S, &ok_c);
    CHECK(ok_a && ok_b && ok_c, "shuffled sequences must still be contiguous, with targets shifted by one");
    for (int e = 0; e < 3; e++) {
        std::vector<int> ep(fa.begin() + e * S, fa.begin() + (e + 1) * S);
        std::set<int> seen(ep.begin(), ep.end());
        CHECK(seen.size() == (size_t)S && seen == all, "epoch %d: every sequence exactly once (%zu distinct of %d)", e, seen.size(), S);
        std::vector<int> epc(fc.begin() + e * S, fc.begin() + (e + 1) * S);
        CHECK(std::set<int>(epc.begin(), epc.end()) == all, "seed 42 epoch %d: every sequence exactly once", e);
    }
    CHECK(fa == fb, "same seed must give the identical order");
    CHECK(fa != fc, "different seeds must give different orders");
    CHECK(!std::equal(fa.begin(), fa.begin() + S, fa.begin() + S), "epoch 0 and epoch 1 must differ");
    CHECK(!std::equal(fa.begin() + S, fa.begin() + 2 * S, fa.begin() + 2 * S), "epoch 1 and epoch 2 must differ");
    // it is really shuffled, not the sorted order
    std::vector<int> sorted(all.begin(), all.end());
    CHECK(!std::equal(fa.begin(), fa.begin() + S, sorted.begin()), "shuffle=true must not give the sorted order");
    // the permutation is fixed by our own splitmix64, not the platform: pin the first few ids of seed 1337
    CHECK(fa[0] == 30080 && fa[1] == 30100 && fa[2] == 30072 && fa[3] == 30076, "pinned start of seed 1337: %d %d %d %d", fa[0], fa[1], fa[2], fa[3]);
    dataloader_free(&a);
    dataloader_free(&b);
    dataloader_free(&c);
}

TEST(shuffle_differs_per_epoch_on_a_single_shard) {
    // one shard: each epoch is a visit of the same shard, and still draws its own sequence order
    // (seeded by (seed, epoch, shard)); a resume at the start of epoch 1 reads that order too
    const int S = 50;
    std::string p = write_shard("oneshard_000.bin", iota_tokens(0, 4 * S + 1), 1);
    DataLoader a;
    dataloader_init(&a, p.c_str(), 2, 4, 5000, true, 1337, 0, 1);
    bool ok;
    std::vector<int> f = read_firsts(&a, 2 * S, &ok);  // S is even: exactly two epochs
    CHECK(ok, "sequences contiguous, targets shifted by one");
    std::vector<int> e0(f.begin(), f.begin() + S), e1(f.begin() + S, f.end());
    std::vector<int> s0 = e0, s1 = e1;
    std::sort(s0.begin(), s0.end());
    std::sort(s1.begin(), s1.end());
    for (int s = 0; s < S; s++) CHECK(s0[s] == 4 * s && s1[s] == 4 * s, "every sequence once per epoch (sorted index %d: %d, %d)", s, s0[s], s1[s]);
    CHECK(e0 != e1, "epoch 1 must not repeat epoch 0's order");
    CHECK(e0 != s0, "epoch 0 is shuffled");
    DataLoader b;
    dataloader_init(&b, p.c_str(), 2, 4, 5000, true, 1337, 0, 1);
    DataLoaderState st = dataloader_get_state(&b);
    st.epoch = 1;
    dataloader_set_state(&b, &st);
    std::vector<int> r = read_firsts(&b, S, &ok);
    CHECK(r == e1, "resumed at the start of epoch 1: the uninterrupted run's epoch 1");
    dataloader_free(&a);
    dataloader_free(&b);
}

TEST(permutation_is_pinned) {
    // splitmix64 + Fisher-Yates are fully specified: these numbers must never change, else resuming
    // a checkpoint from an older build would read other batches.
    uint64_t s = 0;
    CHECK(splitmix64_next(&s) == 0xE220A8397B1DCDAFULL, "splitmix64 reference value for state 0");
    std::vector<uint32_t> p;
    dl_permutation(p, 10, dl_perm_seed(1337, 0, 0));
    std::vector<uint32_t> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    for (uint32_t i = 0; i < 10; i++) CHECK(sorted[i] == i, "a permutation of 0..9");
    // (scripts can reproduce this in Python: see docs/formats.md)
    const uint32_t want[10] = {8, 0, 6, 2, 7, 3, 5, 4, 1, 9};
    for (int i = 0; i < 10; i++) CHECK(p[i] == want[i], "perm(1337,0,0)[%d] = %u, pinned %u", i, p[i], want[i]);
}

TEST(state_resume_is_bit_exact) {
    std::string g = three_shards("state");
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        DataLoader a;
        dataloader_init(&a, g.c_str(), 3, 4, 5000, shuffle != 0, 7, 0, 1);
        std::vector<int> in, tg;
        read_batches(&a, 4, in, tg);  // 12 sequences: mid epoch 1, mid shard
        DataLoaderState st = dataloader_get_state(&a);
        CHECK(st.epoch == 1, "after 12 of 9-per-epoch sequences, epoch %llu", (unsigned long long)st.epoch);
        std::vector<int> want_in, want_tg;
        read_batches(&a, 9, want_in, want_tg);

        // a fresh loader (as after a restart), and one that had read elsewhere
        DataLoader b, c;
        dataloader_init(&b, g.c_str(), 3, 4, 5000, shuffle != 0, 7, 0, 1);
        dataloader_init(&c, g.c_str(), 3, 4, 5000, shuffle != 0, 7, 0, 1);
        read_batches(&c, 5, in, tg);
        DataLoaderState copy;
        memcpy(&copy, &st, sizeof(st));  // as if written to and read from a checkpoint
        dataloader_set_state(&b, &copy);
        dataloader_set_state(&c, &copy);
        std::vector<int> got_in, got_tg;
        read_batches(&b, 9, got_in, got_tg);
        CHECK(got_in == want_in && got_tg == want_tg, "shuffle=%d: resumed batches differ from the uninterrupted run", shuffle);
        read_batches(&c, 9, got_in, got_tg);
        CHECK(got_in == want_in && got_tg == want_tg, "shuffle=%d: set_state on a used loader differs", shuffle);
        dataloader_free(&a);
        dataloader_free(&b);
        dataloader_free(&c);
    }
}

TEST(state_refused_when_it_does_not_fit) {
    std::string g = three_shards("stbad");
    DataLoader a;
    dataloader_init(&a, g.c_str(), 2, 4, 5000, true, 7, 0, 1);
    DataLoaderState st = dataloader_get_state(&a);

    DataLoader other_seed, other_T, other_data;
    dataloader_init(&other_seed, g.c_str(), 2, 4, 5000, true, 8, 0, 1);
    dataloader_init(&other_T, g.c_str(), 2, 3, 5000, true, 7, 0, 1);
    std::string p = write_shard("stother_000.bin", iota_tokens(0, 100), 1);
    dataloader_init(&other_data, p.c_str(), 2, 4, 5000, true, 7, 0, 1);
    ErrInfo e1 = catch_error([&] { dataloader_set_state(&other_seed, &st); });
    ErrInfo e2 = catch_error([&] { dataloader_set_state(&other_T, &st); });
    ErrInfo e3 = catch_error([&] { dataloader_set_state(&other_data, &st); });
    CHECK(e1.code == 1 && contains(e1.msg, "seed"), "other seed: code %d msg '%s'", e1.code, e1.msg.c_str());
    CHECK(e2.code == 1 && contains(e2.msg, "seq_len"), "other T: code %d msg '%s'", e2.code, e2.msg.c_str());
    CHECK(e3.code == 1 && contains(e3.msg, "stother_000.bin"), "other data: code %d msg '%s'", e3.code, e3.msg.c_str());
    DataLoaderState bad = st;
    bad.seq_cursor = 1000;
    ErrInfo e4 = catch_error([&] { dataloader_set_state(&a, &bad); });
    CHECK(e4.code == 1 && contains(e4.msg, "stbad_00"), "cursor past the shard: code %d msg '%s'", e4.code, e4.msg.c_str());
    bad = st;
    bad.magic = 0;
    ErrInfo e5 = catch_error([&] { dataloader_set_state(&a, &bad); });
    CHECK(e5.code == 1, "bad magic: code %d", e5.code);
    dataloader_free(&a);
    dataloader_free(&other_seed);
    dataloader_free(&other_T);
    dataloader_free(&other_data);
}

TEST(state_refused_for_other_shard_sizes_shuffle_or_cursor) {
    // the same number of shards and of tokens, in other sizes (14 + 9 vs 9 + 14 tokens): only the
    // hash of the sizes tells them apart, and resumed there the cursors would point elsewhere
    write_shard("stsize_a_000.bin", iota_tokens(0, 14), 1);
    write_shard("stsize_a_001.bin", iota_tokens(100, 9), 1);
    write_shard("stsize_b_000.bin", iota_tokens(0, 9), 1);
    write_shard("stsize_b_001.bin", iota_tokens(100, 14), 1);
    DataLoader a, b;
    dataloader_init(&a, (tmp_dir() + "/stsize_a_*.bin").c_str(), 1, 4, 5000, false, 0, 0, 1);
    dataloader_init(&b, (tmp_dir() + "/stsize_b_*.bin").c_str(), 1, 4, 5000, false, 0, 0, 1);
    CHECK(a.num_tokens == b.num_tokens && a.files.size() == b.files.size(), "the two datasets differ only in shard sizes");
    DataLoaderState sa = dataloader_get_state(&a);
    ErrInfo e1 = catch_error([&] { dataloader_set_state(&b, &sa); });
    CHECK(e1.code == 1 && contains(e1.msg, "different shard sizes") && contains(e1.msg, "stsize_b_000.bin"), "other shard sizes: code %d msg '%s'", e1.code,
          e1.msg.c_str());
    dataloader_free(&a);
    dataloader_free(&b);

    // a shuffled run's state in an unshuffled loader, and the other way round (same seed): the
    // stream would not be the one the checkpointed run read
    std::string g = three_shards("stshuf");
    DataLoader shuf, plain;
    dataloader_init(&shuf, g.c_str(), 2, 4, 5000, true, 7, 0, 1);
    dataloader_init(&plain, g.c_str(), 2, 4, 5000, false, 7, 0, 1);
    DataLoaderState ss = dataloader_get_state(&shuf), sp = dataloader_get_state(&plain);
    ErrInfo e2 = catch_error([&] { dataloader_set_state(&plain, &ss); });
    ErrInfo e3 = catch_error([&] { dataloader_set_state(&shuf, &sp); });
    CHECK(e2.code == 1 && contains(e2.msg, "shuffle=1") && contains(e2.msg, "shuffle=0"), "shuffled state, unshuffled loader: code %d msg '%s'", e2.code,
          e2.msg.c_str());
    CHECK(e3.code == 1 && contains(e3.msg, "shuffle=0") && contains(e3.msg, "shuffle=1"), "unshuffled state, shuffled loader: code %d msg '%s'", e3.code,
          e3.msg.c_str());
    // a shard cursor one past the last shard (3 shards: cursors 0..2)
    DataLoaderState past = ss;
    past.shard_cursor = 3;
    ErrInfo e4 = catch_error([&] { dataloader_set_state(&shuf, &past); });
    CHECK(e4.code == 1 && contains(e4.msg, "points at shard 3, but there are 3 shards"), "shard cursor past the end: code %d msg '%s'", e4.code,
          e4.msg.c_str());
    dataloader_free(&shuf);
    dataloader_free(&plain);
}

TEST(rank_world_split_the_stream) {
    std::string g = three_shards("rank");
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        const int B = 2, T = 4, steps = 10;
        DataLoader whole, r0, r1;
        dataloader_init(&whole, g.c_str(), 2 * B, T, 5000, shuffle != 0, 3, 0, 1);
        dataloader_init(&r0, g.c_str(), B, T, 5000, shuffle != 0, 3, 0, 2);
        dataloader_init(&r1, g.c_str(), B, T, 5000, shuffle != 0, 3, 1, 2);
        std::vector<int> w_in, w_tg, in0, tg0, in1, tg1;
        read_batches(&whole, steps, w_in, w_tg);
        read_batches(&r0, steps, in0, tg0);
        read_batches(&r1, steps, in1, tg1);
        // global sequence g goes to rank g % 2, in order
        bool ok = true;
        for (int s = 0; s < steps * 2 * B; s++) {
            const std::vector<int>& in = (s % 2 == 0) ? in0 : in1;
            const std::vector<int>& tg = (s % 2 == 0) ? tg0 : tg1;
            int local = s / 2;
            for (int t = 0; t < T; t++) {
                if (in[local * T + t] != w_in[s * T + t] || tg[local * T + t] != w_tg[s * T + t]) ok = false;
            }
        }
        CHECK(ok, "shuffle=%d: ranks 0/1 must read the even/odd sequences of the global stream", shuffle);
        // within one epoch (9 sequences) the two ranks' sequences are disjoint
        std::set<int> s0, s1;
        for (int k = 0; k < 4; k++) { s0.insert(in0[k * T]); s1.insert(in1[k * T]); }
        bool disjoint = true;
        for (int x : s0) if (s1.count(x)) disjoint = false;
        CHECK(disjoint && s0.size() == 4 && s1.size() == 4, "shuffle=%d: ranks overlap within an epoch", shuffle);
        // a state saved on rank 0 restores rank 1 (the state is rank-independent)
        DataLoaderState st = dataloader_get_state(&r0);
        std::vector<int> want_in, want_tg, got_in, got_tg;
        read_batches(&r1, 3, want_in, want_tg);
        DataLoader r1b;
        dataloader_init(&r1b, g.c_str(), B, T, 5000, shuffle != 0, 3, 1, 2);
        dataloader_set_state(&r1b, &st);
        read_batches(&r1b, 3, got_in, got_tg);
        CHECK(got_in == want_in && got_tg == want_tg, "shuffle=%d: rank 0's state must restore rank 1", shuffle);
        dataloader_free(&whole);
        dataloader_free(&r0);
        dataloader_free(&r1);
        dataloader_free(&r1b);
    }
}

// A version-2 shard of the format's largest count, 2^31-1 uint32 tokens: 8 GiB + 1020 bytes, so
// its size check, its counts and the cursors a checkpoint stores need 64 bits. The file is sparse
// (only the header is written; the rest reads as zeros and takes no disk). Nothing here loads it,
// which would allocate 8 GiB: init checks its header and size, and the cursors are walked to its
// last sequence, restored there from a state, and moved across it into the small shard after it.
TEST(shard_beyond_4_gib_is_counted_in_64_bits) {
    const uint64_t N = 2147483647ull;
    const int T = 8;
    std::string big = tmp_path("huge_000.bin");
    write_bytes(big, shard_bytes({}, 2, SHARD_MAGIC, (int64_t)N));
    REQUIRE(truncate(big.c_str(), (off_t)(SHARD_HEADER_BYTES + 4 * N)) == 0, "truncate '%s': %s", big.c_str(), strerror(errno));
    write_shard("huge_001.bin", iota_tokens(0, 41), 2);  // 5 sequences of T=8
    DataLoader dl;
    dataloader_init(&dl, (tmp_dir() + "/huge_*.bin").c_str(), 2, T, 5000, true, 7, 0, 1);
    const uint64_t big_seqs = (N - 1) / T;  // 268,435,455
    CHECK(dl.shard_tokens[0] == N && dl.shard_token_bytes[0] == 4 && dl.shard_seqs[0] == big_seqs, "the big shard: %llu tokens, %llu sequences",
          (unsigned long long)dl.shard_tokens[0], (unsigned long long)dl.shard_seqs[0]);
    CHECK(dl.num_tokens == N + 41 && dl.num_seqs == big_seqs + 5, "dataset: %llu tokens, %llu sequences", (unsigned long long)dl.num_tokens,
          (unsigned long long)dl.num_seqs);
    // where epoch 3's shard order puts the big shard (the order is shuffled per epoch)
    uint64_t at = dl_file_at(&dl, 3, 0) == 0 ? 0 : 1;
    DataLoaderState st = dataloader_get_state(&dl);
    st.epoch = 3;
    st.shard_cursor = at;
    st.seq_cursor = big_seqs - 1;  // its last sequence: tokens [2^31 - 16, 2^31 - 8], bytes past 8 GiB
    dataloader_set_state(&dl, &st);
    DataLoaderState back = dataloader_get_state(&dl);
    CHECK(memcmp(&back, &st, sizeof(st)) == 0, "a state at the last sequence of the big shard restores as it was saved");
    DataLoaderState past = st;
    past.seq_cursor = big_seqs;
    ErrInfo e = catch_error([&] { dataloader_set_state(&dl, &past); });
    CHECK(e.code == 1 && contains(e.msg, "268435455 sequences"), "one past its last sequence is refused: code %d '%s'", e.code, e.msg.c_str());
    // one more sequence leaves the big shard: into the small one, or the next epoch
    DataLoaderCursor c = dl.next;
    dl_advance(&dl, &c, 1);
    CHECK(at == 0 ? (c.epoch == 3 && c.shard == 1 && c.seq == 0) : (c.epoch == 4 && c.shard == 0 && c.seq == 0), "after the last sequence: epoch %llu shard %llu seq %llu",
          (unsigned long long)c.epoch, (unsigned long long)c.shard, (unsigned long long)c.seq);
    // whole epochs of 268,435,460 sequences at once, from an epoch's start
    DataLoaderCursor z = {0, 0, 0};
    dl_advance(&dl, &z, 3 * dl.num_seqs + 2);
    CHECK(z.epoch == 3 && (z.shard == 0 && z.seq == 2), "3 epochs and 2 sequences: epoch %llu shard %llu seq %llu", (unsigned long long)z.epoch,
          (unsigned long long)z.shard, (unsigned long long)z.seq);
    dataloader_free(&dl);
}

TEST(tiny_dataset_wraps) {
    // B*T*world larger than the whole dataset is fine: it wraps into the next epochs
    std::string p = write_shard("tiny_000.bin", iota_tokens(0, 9), 1);  // 2 sequences of T=4
    DataLoader dl;
    dataloader_init(&dl, p.c_str(), 5, 4, 100, false, 0, 1, 3);
    std::vector<int> in, tg;
    read_batches(&dl, 2, in, tg);
    // rank 1 of 3 reads global sequences 1, 4, 7, 10, ... = local sequence g % 2
    for (int b = 0; b < 10; b++) {
        int gidx = 1 + 3 * b;
        int want = 4 * (gidx & 1);
        CHECK(in[b * 4] == want, "row %d: %d vs %d", b, in[b * 4], want);
    }
    dataloader_free(&dl);
}

// ----------------------------------------------------------------------------
// data loader: bad inputs

static ErrInfo init_error(const std::string& pattern, int T = 4, int vocab = 70000) {
    DataLoader dl;  // freed even when init or a batch throws, so the sanitizers see no leak
    ErrInfo e = catch_error([&] {
        dataloader_init(&dl, pattern.c_str(), 2, T, vocab, false, 0, 0, 1);
        std::vector<int> in(2 * T), tg(2 * T);
        for (int i = 0; i < 4; i++) dataloader_next_batch(&dl, in.data(), tg.data());
    });
    dataloader_free(&dl);
    return e;
}

TEST(shard_errors_name_the_file) {
    std::vector<uint32_t> toks = iota_tokens(0, 41);
    struct Case {
        const char* name;
        std::vector<unsigned char> bytes;
        const char* must_say;  // besides the file name
    };
    std::vector<unsigned char> ok1 = shard_bytes(toks, 1);
    std::vector<unsigned char> truncated(ok1.begin(), ok1.end() - 3);
    std::vector<unsigned char> trailing = ok1;
    trailing.push_back(0);
    trailing.push_back(0);
    std::vector<unsigned char> short_header(ok1.begin(), ok1.begin() + 100);
    std::string text = "First Citizen:\nBefore we proceed any further, hear me speak.\n";
    std::vector<unsigned char> text_bytes(text.begin(), text.end());
    while (text_bytes.size() < 2000) text_bytes.push_back('x');
    std::vector<uint32_t> big = toks;
    big[17] = 70000;  // >= vocab 70000
    std::vector<Case> cases = {
        {"err_truncated.bin", truncated, "truncated"},
        {"err_trailing.bin", trailing, "trailing garbage"},
        {"err_short_header.bin", short_header, "is truncated: it is 100 bytes, shorter than the 1024-byte header"},
        {"err_magic.bin", shard_bytes(toks, 1, 12345), "12345"},
        {"err_llmc_model.bin", shard_bytes(toks, 1, 20240326), "checkpoint"},
        {"err_text.bin", text_bytes, "it looks like a text file (it starts with \"First Citizen:"},
        {"err_version.bin", shard_bytes(toks, 3), "version 3"},
        {"err_empty.bin", {}, "0 bytes"},
        {"err_vocab.bin", shard_bytes(big, 2), "token id 70000 at position 17"},
        {"err_too_short.bin", shard_bytes(iota_tokens(0, 4), 1), "T=4"},
        // a count of 2^31 or more (a writer that stores it unsigned) is past the int32 format
        {"err_count_2g.bin", shard_bytes(toks, 2, SHARD_MAGIC, 3000000000ll), "a token count of 3000000000"},
    };
    for (const Case& c : cases) {
        std::string p = tmp_path(c.name);
        write_bytes(p, c.bytes);
        ErrInfo e = init_error(p);
        CHECK(e.code == 1, "%s: exit code %d (want 1), msg '%s'", c.name, e.code, e.msg.c_str());
        CHECK(contains(e.msg, c.name), "%s: message does not name the file: '%s'", c.name, e.msg.c_str());
        CHECK(contains(e.msg, c.must_say), "%s: message lacks '%s': '%s'", c.name, c.must_say, e.msg.c_str());
    }
    // the vocab message also gives the vocab size
    ErrInfo e = init_error(tmp_dir() + "/err_vocab.bin");
    CHECK(contains(e.msg, "70000") && contains(e.msg, "vocab size 70000"), "vocab message: '%s'", e.msg.c_str());
    // the size message gives both sizes
    e = init_error(tmp_dir() + "/err_trailing.bin");
    char sizes[64];
    snprintf(sizes, sizeof(sizes), "%zu bytes", trailing.size());
    CHECK(contains(e.msg, sizes) && contains(e.msg, "1106 bytes"), "size message: '%s'", e.msg.c_str());
    e = init_error(tmp_dir() + "/err_count_2g.bin");
    CHECK(contains(e.msg, "2^31-1"), "a count past the format says its limit: '%s'", e.msg.c_str());
    // a bad shard among good ones fails at init, before any batch
    write_shard("mixed_000.bin", toks, 1);
    std::string bad = tmp_path("mixed_001.bin");
    write_bytes(bad, truncated);
    ErrInfo em = catch_error([&] {
        DataLoader dl;
        dataloader_init(&dl, (tmp_dir() + "/mixed_*.bin").c_str(), 2, 4, 70000, false, 0, 0, 1);
    });
    CHECK(em.code == 1 && contains(em.msg, "mixed_001.bin"), "bad shard among good: code %d '%s'", em.code, em.msg.c_str());
}

// A glob that matches what is not a shard: a directory (fopen and fread of it would report "0
// bytes, shorter than the header"), and a link to nowhere (glob lists it; stat fails).
TEST(shard_that_is_a_directory_or_a_broken_link_is_named) {
    std::string dir = tmp_path("notfile_000.bin");
    CHECK(mkdir(dir.c_str(), 0700) == 0, "mkdir %s", dir.c_str());
    ErrInfo e = init_error(tmp_dir() + "/notfile_*.bin");
    CHECK(e.code == 1 && contains(e.msg, "notfile_000.bin") && contains(e.msg, "is not a regular file (a directory?)"), "directory: code %d '%s'", e.code, e.msg.c_str());
    std::string link = tmp_path("broken_000.bin");
    CHECK(symlink((tmp_dir() + "/no_such_target.bin").c_str(), link.c_str()) == 0, "symlink %s", link.c_str());
    e = init_error(tmp_dir() + "/broken_*.bin");
    CHECK(e.code == 1 && contains(e.msg, "cannot stat shard") && contains(e.msg, "broken_000.bin"), "broken link: code %d '%s'", e.code, e.msg.c_str());
}

// A training shard that fails when it is loaded mid-run (removed, or rewritten with a bad id,
// after startup) raises the usual error; under an ErrorCapture (how the trainer reads a step's
// data, host/train_loop.h) that error is thrown as a CapturedError with its code, message and
// hint, so the trainer can save the last completed step first. Outside one it is the plain error.
TEST(mid_run_shard_failures_are_captured) {
    for (int how = 0; how < 2; how++) {
        std::string prefix = how == 0 ? "midrun_removed" : "midrun_badid";
        std::string g = three_shards(prefix);
        DataLoader dl;
        dataloader_init(&dl, g.c_str(), 1, 4, 5000, true, 7, 0, 1);  // shuffled: shards load as they come
        std::vector<int> in(4), tg(4);
        dataloader_next_batch(&dl, in.data(), tg.data());
        int first = dl.loaded_file;
        CHECK(first >= 0, "the first batch loads the first shard");
        for (int fi = 0; fi < 3; fi++) {
            if (fi == first) continue;
            if (how == 0) {
                CHECK(remove(dl.files[fi].c_str()) == 0, "remove %s", dl.files[fi].c_str());
            } else {  // the same size, so only the id check can tell
                std::vector<uint32_t> toks = iota_tokens(0, (int)dl.shard_tokens[fi]);
                toks[5] = 5000;
                write_bytes(dl.files[fi], shard_bytes(toks, dl.shard_token_bytes[fi] == 2 ? 1 : 2));
            }
        }
        CapturedError err{0, "", ""};
        int batches = 0;
        try {
            ErrorCapture capture;
            for (; batches < 100; batches++) dataloader_next_batch(&dl, in.data(), tg.data());
        } catch (const CapturedError& e) {
            err = e;
        }
        CHECK(error_capture_depth() == 0, "the capture ends with its scope");
        CHECK(err.code == 1 && batches > 0 && batches < 9, "%s: code %d after %d batches", prefix.c_str(), err.code, batches);
        CHECK(contains(err.message, prefix) && contains(err.message, how == 0 ? "cannot open" : "token id 5000 at position 5"),
              "%s: message '%s'", prefix.c_str(), err.message.c_str());
        CHECK(!err.hint.empty(), "%s: the hint travels with the message", prefix.c_str());
        ErrInfo plain = catch_error([&] { dataloader_next_batch(&dl, in.data(), tg.data()); });  // no capture: the usual error
        CHECK(plain.code == 1 && contains(plain.msg, prefix), "%s uncaptured: code %d '%s'", prefix.c_str(), plain.code, plain.msg.c_str());
        dataloader_free(&dl);
    }
}

// A shard replaced after startup by a valid shard of another size or token width is refused when
// it is loaded (its header no longer matches what init checked), not read as the old size. And a
// load that fails leaves no shard loaded: the buffer holds part of the failed file, so going back
// to the shard that was loaded before reads it from disk again, not the failed file's bytes.
TEST(shard_changed_since_startup_is_refused_and_a_failed_load_keeps_nothing) {
    for (int how = 0; how < 2; how++) {
        std::string prefix = how == 0 ? "changed_count" : "changed_width";
        std::string g = three_shards(prefix);
        DataLoader dl;
        dataloader_init(&dl, g.c_str(), 1, 4, 5000, false, 0, 0, 1);  // unshuffled: every shard was loaded at init
        // shard 0 (14 uint16 tokens) becomes 22 tokens, or the same 14 tokens as uint32
        write_bytes(dl.files[0], how == 0 ? shard_bytes(iota_tokens(1000, 22), 1) : shard_bytes(iota_tokens(1000, 14), 2));
        std::vector<int> in(4), tg(4);
        ErrInfo e = catch_error([&] { dataloader_next_batch(&dl, in.data(), tg.data()); });
        CHECK(e.code == 1 && contains(e.msg, prefix + "_000.bin") && contains(e.msg, "changed since startup"), "%s: code %d msg '%s'", prefix.c_str(),
              e.code, e.msg.c_str());
        dataloader_free(&dl);
    }
    std::string g = three_shards("reload");
    DataLoader dl;
    dataloader_init(&dl, g.c_str(), 1, 4, 5000, false, 0, 0, 1);
    // shard 1 keeps its size (9 uint32 tokens, 36 bytes: it is read into the buffer that holds shard 0)
    // but gets an id past the vocabulary
    std::vector<uint32_t> bad = iota_tokens(2000, 9);
    bad[5] = 5000;
    write_bytes(dl.files[1], shard_bytes(bad, 2));
    std::vector<int> in(4), tg(4);
    for (int s = 0; s < 3; s++) dataloader_next_batch(&dl, in.data(), tg.data());  // shard 0's 3 sequences
    CHECK(in[0] == 1008, "shard 0's last sequence: %d", in[0]);
    ErrInfo e = catch_error([&] { dataloader_next_batch(&dl, in.data(), tg.data()); });
    CHECK(e.code == 1 && contains(e.msg, "token id 5000 at position 5"), "the bad shard: code %d msg '%s'", e.code, e.msg.c_str());
    dataloader_reset(&dl);
    for (int s = 0; s < 3; s++) {
        dataloader_next_batch(&dl, in.data(), tg.data());
        for (int t = 0; t < 4; t++)
            CHECK(in[t] == 1000 + 4 * s + t && tg[t] == 1001 + 4 * s + t, "shard 0 after the failed load, seq %d t %d: %d %d", s, t, in[t], tg[t]);
    }
    dataloader_free(&dl);
}

// ----------------------------------------------------------------------------
// multiple-choice files (.vpmc, host/mc_eval.h; written by scripts/vp_data/mc.py)

// The ints of a .vpmc file: header then body (see docs/formats.md).
static std::vector<int32_t> mc_ints(const std::vector<int32_t>& body, int n_examples, int vocab, const char* tok = "gpt2") {
    std::vector<int32_t> ints(MC_HEADER_INTS, 0);
    ints[0] = MC_MAGIC;
    ints[1] = MC_VERSION;
    ints[2] = n_examples;
    ints[3] = vocab;
    ints[4] = (int32_t)body.size();
    memcpy(ints.data() + 8, tok, strlen(tok));
    ints.insert(ints.end(), body.begin(), body.end());
    return ints;
}

static std::string write_mc(const std::string& name, const std::vector<int32_t>& ints) {
    std::vector<unsigned char> bytes(ints.size() * 4);
    for (size_t i = 0; i < ints.size(); i++)
        for (int k = 0; k < 4; k++) bytes[4 * i + k] = (unsigned char)((uint32_t)ints[i] >> (8 * k));
    std::string p = tmp_path(name);
    write_bytes(p, bytes);
    return p;
}

// Two examples: 3 choices (label 2, context 7 8, endings [1], [2 3], [4]) and 2 (label 0,
// context 9, endings [5 6 7], [8]).
static const std::vector<int32_t> MC_BODY = {3, 2, 2, 1, 4, 2, 9, 1, 3, 7, 8, 1, 2, 3, 4,
                                             2, 0, 1, 3, 11, 1, 2, 9, 5, 6, 7, 8};

TEST(mc_file_round_trip) {
    std::string p = write_mc("ok.vpmc", mc_ints(MC_BODY, 2, 100));
    McSet set;
    mc_load(&set, p, 100);
    REQUIRE(set.examples.size() == 2, "%zu examples", set.examples.size());
    const McExample& a = set.examples[0];
    const McExample& b = set.examples[1];
    CHECK(set.tokenizer == "gpt2", "tokenizer '%s'", set.tokenizer.c_str());
    CHECK(a.label == 2 && a.context == std::vector<int>({7, 8}) && a.endings.size() == 3, "example 0 header");
    CHECK(a.endings[0] == std::vector<int>({1}) && a.endings[1] == std::vector<int>({2, 3}) && a.endings[2] == std::vector<int>({4}), "example 0 endings");
    CHECK(a.ending_chars == std::vector<int>({4, 9, 3}), "example 0 chars");
    CHECK(b.label == 0 && b.context == std::vector<int>({9}) && b.endings[0] == std::vector<int>({5, 6, 7}) && b.endings[1] == std::vector<int>({8}),
          "example 1");
    CHECK(b.ending_chars == std::vector<int>({11, 2}), "example 1 chars");
    // rows: context + ending, cut to the last T + 1 tokens; scored from the ending's first token
    // that still has a predecessor in the row
    McRow whole = mc_row(b, 0, 8);
    CHECK(whole.tokens == std::vector<int>({9, 5, 6, 7}) && whole.first_scored == 1 && !whole.truncated, "b/0 at T=8");
    McRow cut = mc_row(a, 1, 2);  // 7 8 2 3 -> 8 2 3
    CHECK(cut.tokens == std::vector<int>({8, 2, 3}) && cut.first_scored == 1 && cut.truncated, "a/1 at T=2");
    McRow into_ending = mc_row(b, 0, 1);  // 9 5 6 7 -> 6 7: only 7 has its predecessor
    CHECK(into_ending.tokens == std::vector<int>({6, 7}) && into_ending.first_scored == 1 && into_ending.truncated, "b/0 at T=1");
    // batches: rows (a/0, a/1, a/2, b/0, b/1) have 2, 3, 2, 3, 1 input positions; longest first,
    // ties in row order, each batch at its longest rounded up to the step and capped at T
    auto batches_are = [&](int B, int T, int step, const std::vector<McBatch>& want) {
        std::vector<McBatch> got = mc_batches(set, B, T, step);
        bool same = got.size() == want.size();
        for (size_t i = 0; same && i < got.size(); i++)
            same = got[i].rows == want[i].rows && got[i].T == want[i].T && got[i].row_positions == want[i].row_positions;
        CHECK(same, "batches at B=%d T=%d step %d", B, T, step);
    };
    batches_are(2, 8, 2, {{{1, 3}, 4, 6}, {{0, 2}, 2, 4}, {{4}, 2, 1}});
    batches_are(2, 8, 1, {{{1, 3}, 3, 6}, {{0, 2}, 2, 4}, {{4}, 1, 1}});
    batches_are(2, 8, MC_FORWARD_STEP, {{{1, 3}, 8, 6}, {{0, 2}, 8, 4}, {{4}, 8, 1}});
    batches_are(4, 2, 1, {{{0, 1, 2, 3}, 2, 8}, {{4}, 1, 1}});  // at T=2 rows keep 3 tokens: 2 positions
}

TEST(mc_file_errors_name_the_file) {
    struct Case {
        const char* name;
        std::vector<int32_t> ints;
        const char* must_say;
    };
    auto body_with = [](size_t i, int32_t v) { std::vector<int32_t> b = MC_BODY; b[i] = v; return b; };
    std::vector<int32_t> ok = mc_ints(MC_BODY, 2, 100);
    std::vector<int32_t> truncated(ok.begin(), ok.end() - 1);
    std::vector<int32_t> bad_magic = ok;
    bad_magic[0] = SHARD_MAGIC;
    std::vector<int32_t> bad_version = ok;
    bad_version[1] = 2;
    std::vector<int32_t> trailing_body = MC_BODY;
    trailing_body.push_back(0);
    std::vector<Case> cases = {
        {"mc_truncated.vpmc", truncated, "truncated"},
        // the short-header check itself: its first ints are a good header's, so a later check
        // (the size the header promises) would speak of a header too
        {"mc_short.vpmc", std::vector<int32_t>(ok.begin(), ok.begin() + 10), "shorter than the"},
        {"mc_magic.vpmc", bad_magic, "not a .vpmc file"},
        {"mc_version.vpmc", bad_version, "version 2"},
        {"mc_vocab.vpmc", mc_ints(MC_BODY, 2, 50257), "vocabulary 50257"},
        {"mc_count.vpmc", mc_ints(MC_BODY, 3, 100), "damaged"},
        {"mc_zero.vpmc", mc_ints(MC_BODY, 0, 100), "0 examples"},
        {"mc_one_choice.vpmc", mc_ints(body_with(0, 1), 2, 100), "1 choices"},
        {"mc_label.vpmc", mc_ints(body_with(1, 3), 2, 100), "label 3"},
        {"mc_neg_label.vpmc", mc_ints(body_with(1, -1), 2, 100), "label -1"},
        {"mc_empty_context.vpmc", mc_ints(body_with(2, 0), 2, 100), "context of 0 tokens"},
        {"mc_empty_ending.vpmc", mc_ints(body_with(3, 0), 2, 100), "ending of 0 tokens"},
        {"mc_chars.vpmc", mc_ints(body_with(4, 0), 2, 100), "0 characters"},
        {"mc_long_ending.vpmc", mc_ints(body_with(5, 50), 2, 100), "past the end"},
        // 64 choices promised in 10 ints: the per-example counts run past the body (read beyond
        // the buffer without the check)
        {"mc_many_choices.vpmc", mc_ints({64, 0, 1, 1, 1, 1, 1, 1, 1, 1}, 1, 100), "example 0 runs past the end"},
        // a control byte in the tokenizer name would reach the logs and messages as is
        {"mc_name_byte.vpmc", mc_ints(MC_BODY, 2, 100, "gp\x01t2"), "tokenizer name with byte 1"},
        {"mc_token.vpmc", mc_ints(body_with(9, 100), 2, 100), "token id 100"},
        {"mc_neg_token.vpmc", mc_ints(body_with(25, -5), 2, 100), "token id -5"},
        {"mc_trailing.vpmc", mc_ints(trailing_body, 2, 100), "after the last example"},
    };
    for (const Case& c : cases) {
        std::string p = write_mc(c.name, c.ints);
        McSet set;
        ErrInfo e = catch_error([&] { mc_load(&set, p, 100); });
        CHECK(e.code == 1, "%s: exit code %d (want 1), msg '%s'", c.name, e.code, e.msg.c_str());
        CHECK(contains(e.msg, c.name), "%s: message does not name the file: '%s'", c.name, e.msg.c_str());
        CHECK(contains(e.msg, c.must_say), "%s: message lacks '%s': '%s'", c.name, c.must_say, e.msg.c_str());
    }
    ErrInfo dir = catch_error([&] { McSet set; mc_load(&set, tmp_dir(), 100); });
    CHECK(dir.code == 1 && contains(dir.msg, "not a regular file"), "a directory: '%s'", dir.msg.c_str());
    ErrInfo missing = catch_error([&] { McSet set; mc_load(&set, tmp_dir() + "/no_such.vpmc", 100); });
    CHECK(missing.code == 1 && contains(missing.msg, "no_such.vpmc"), "a missing file: '%s'", missing.msg.c_str());
}

TEST(glob_without_match) {
    std::string pattern = tmp_dir() + "/nothing_here_*.bin";
    ErrInfo e = init_error(pattern);
    CHECK(e.code == 1, "code %d", e.code);
    CHECK(contains(e.msg, pattern), "message must say the glob: '%s'", e.msg.c_str());
}

TEST(bad_arguments_are_usage_errors) {
    std::string p = write_shard("args_000.bin", iota_tokens(0, 50), 1);
    DataLoader dl;
    ErrInfo e1 = catch_error([&] { dataloader_init(&dl, p.c_str(), 0, 4, 100, false, 0, 0, 1); });
    ErrInfo e2 = catch_error([&] { dataloader_init(&dl, p.c_str(), 1, 4, 100, false, 0, 2, 2); });
    CHECK(e1.code == 2 && e2.code == 2, "codes %d %d", e1.code, e2.code);
    ErrInfo e3 = catch_error([&] { dataloader_init(&dl, p.c_str(), 1, 4, 0, false, 0, 0, 1); });
    CHECK(e3.code == 2 && contains(e3.msg, "vocab size must be positive, got 0"), "vocab 0: code %d '%s'", e3.code, e3.msg.c_str());
}

// checkpoint_read_shard checks the file's parameter count against the model it loads into. The
// trainers build that model from the checkpoint's own header (resolve_model_config), so they never
// meet a mismatch; a direct caller with a model of another shape must be refused, not have its
// buffers filled short (or overrun).
TEST(checkpoint_of_another_parameter_count_is_refused) {
    std::string file = tmp_path("ckpt_count/ckpt_00000000.bin"), dir = tmp_path("ckpt_count");  // removed in this order
    CHECK(mkdir(dir.c_str(), 0700) == 0, "mkdir %s", dir.c_str());
    CheckpointMeta meta;
    memset(&meta.model, 0, sizeof(meta.model));
    meta.num_params = 10;
    std::vector<float> params(10, 0.5f);
    checkpoint_write(dir, meta, params.data(), nullptr, nullptr);
    CHECK(checkpoint_path(dir, 0) == file, "checkpoint written to %s", checkpoint_path(dir, 0).c_str());
    for (size_t model_params : {10, 12, 8}) {
        std::vector<float> got(model_params, 0.0f);
        CheckpointMeta read;
        ErrInfo e = catch_error([&] {
            checkpoint_read_shard(file, &read, model_params, false, DistShard{0, model_params}, [&](int t, size_t i, const float* x, size_t n) {
                if (t == 0 && i + n <= got.size()) memcpy(got.data() + i, x, n * sizeof(float));
            });
        });
        if (model_params == 10) {
            CHECK(e.code == 0 && got == params, "the right count: code %d '%s'", e.code, e.msg.c_str());
        } else {
            char want[96];
            snprintf(want, sizeof(want), "holds 10 parameters, the model has %zu", model_params);
            CHECK(e.code == 1 && contains(e.msg, want) && contains(e.msg, "ckpt_00000000.bin"), "model of %zu: code %d '%s'", model_params, e.code, e.msg.c_str());
        }
    }
}

// check_token_ids guards batches that do not come from the data loader (sampling, tests): an id
// below 0 or at V or above, in the inputs or the targets, is refused with its position.
TEST(check_token_ids_refuses_ids_outside_the_vocabulary) {
    std::vector<int> in = {0, 5, 9, 3}, tg = {5, 9, 3, 1};
    CHECK(catch_error([&] { check_token_ids(in.data(), tg.data(), 4, 10); }).code == 0, "valid ids refused");
    CHECK(catch_error([&] { check_token_ids(in.data(), nullptr, 4, 10); }).code == 0, "valid ids without targets refused");
    struct { std::vector<int> in, tg; const char* must_say; } cases[] = {
        {{0, 5, 10, 3}, {5, 9, 3, 1}, "token id 10 at position 2 is outside the vocabulary [0, 10)"},
        {{0, 5, 9, 3}, {5, 9, 3, -1}, "token id -1 at position 3 is outside the vocabulary [0, 10)"},
    };
    for (auto& c : cases) {
        ErrInfo e = catch_error([&] { check_token_ids(c.in.data(), c.tg.data(), 4, 10); });
        CHECK(e.code == 1 && contains(e.msg, c.must_say), "code %d '%s' (want '%s')", e.code, e.msg.c_str(), c.must_say);
    }
}

// ----------------------------------------------------------------------------
// tokenizer

static std::string find_encoder_json() {
    std::vector<std::string> dirs;
    if (getenv("VP_DATA_DIR")) dirs.push_back(getenv("VP_DATA_DIR"));
    dirs.push_back("shared/data");
    dirs.push_back("../shared/data");
    dirs.push_back("/work/shared/data");
    for (const std::string& d : dirs) {
        std::string p = d + "/tokenizers/gpt2/encoder.json";
        FILE* f = fopen(p.c_str(), "rb");
        if (f) { fclose(f); return p; }
    }
    return "";
}

// What tokenizer_print writes for ids, as a string of raw bytes.
static std::string printed(const Tokenizer* tok, const std::vector<int>& ids) {
    std::string p = tmp_path("printed.txt");
    FILE* f = fopen(p.c_str(), "wb+");
    tokenizer_print(tok, ids.data(), (int)ids.size(), f);
    rewind(f);
    std::string out;
    int c;
    while ((c = fgetc(f)) != EOF) out.push_back((char)c);
    fclose(f);
    return out;
}

TEST(gpt2_encoder_json) {
    std::string path = find_encoder_json();
    REQUIRE(!path.empty(), "GPT-2 encoder.json not found; set VP_DATA_DIR to the shared data folder");
    Tokenizer tok;
    tokenizer_init(&tok, path.c_str());
    CHECK(tokenizer_vocab_size(&tok) == 50257, "vocab %d", tokenizer_vocab_size(&tok));
    CHECK(tokenizer_eot(&tok) == 50256, "eot %d", tokenizer_eot(&tok));
    struct { int id; const char* s; } known[] = {
        {50256, "<|endoftext|>"}, {198, "\n"}, {220, " "}, {464, "The"}, {15496, "Hello"}, {11, ","},
        {0, "!"}, {256, " t"}, {1, "\""}, {59, "\\"},
    };
    for (auto& k : known) CHECK(strcmp(tokenizer_decode(&tok, k.id), k.s) == 0, "id %d decodes to '%s'", k.id, tokenizer_decode(&tok, k.id));
    CHECK(strcmp(tokenizer_decode(&tok, 255), "\xad") == 0, "id 255 is byte 0xAD");
    // a token that ends inside a UTF-8 character (the first 3 bytes of U+1F600-ish emoji)
    CHECK(strcmp(tokenizer_decode(&tok, 30325), " \xf0\x9f\x98") == 0, "id 30325 is a partial UTF-8 sequence");
    CHECK(strcmp(tokenizer_decode(&tok, 50257), "<|id:50257|>") == 0, "out of range: '%s'", tokenizer_decode(&tok, 50257));
    CHECK(strcmp(tokenizer_decode(&tok, -1), "<|id:-1|>") == 0, "negative id");
    std::string s = printed(&tok, {15496, 11, 220, 464, 198, 50256, 99999});
    CHECK(s == "Hello, The\n<|endoftext|><|id:99999|>", "printed '%s'", s.c_str());
    tokenizer_free(&tok);
}

// A vptok file from token byte strings (with optional damage), as the Python exporter writes it.
static std::vector<unsigned char> vptok_bytes(const std::vector<std::string>& toks, int eot, int version = 1, int32_t n_override = -2) {
    std::vector<unsigned char> b;
    put_le32(b, VPTOK_MAGIC);
    put_le32(b, (uint32_t)version);
    put_le32(b, (uint32_t)(n_override == -2 ? (int32_t)toks.size() : n_override));
    put_le32(b, (uint32_t)eot);
    while (b.size() < VPTOK_HEADER_BYTES) b.push_back(0);
    for (const std::string& t : toks) {
        put_le32(b, (uint32_t)t.size());
        b.insert(b.end(), t.begin(), t.end());
    }
    return b;
}

static std::vector<std::string> test_vocab() {
    std::vector<std::string> toks;
    for (int b = 0; b < 256; b++) toks.push_back(std::string(1, (char)b));  // every byte, 0x00 included
    toks.push_back("h\xc3\xa9llo");         // héllo
    toks.push_back("\xe6\x97\xa5\xe6\x9c\xac");  // 日本
    toks.push_back("\xf0\x9f\x99\x82");     // 🙂
    toks.push_back("\xf0\x9f");             // a partial UTF-8 sequence
    toks.push_back("");                      // an empty token
    toks.push_back(std::string("a\0b", 3));  // a NUL inside
    toks.push_back("<|endoftext|>");
    return toks;
}

TEST(vptok_round_trip) {
    std::vector<std::string> toks = test_vocab();
    int eot = (int)toks.size() - 1;
    std::string p = tmp_path("tok.vptok");
    write_bytes(p, vptok_bytes(toks, eot));
    Tokenizer tok;
    tokenizer_init(&tok, p.c_str());
    CHECK(tokenizer_vocab_size(&tok) == (int)toks.size(), "vocab %d", tokenizer_vocab_size(&tok));
    CHECK(tokenizer_eot(&tok) == eot, "eot %d", tokenizer_eot(&tok));
    for (size_t i = 0; i < toks.size(); i++) {
        // decode gives the bytes up to the first NUL
        CHECK(strcmp(tokenizer_decode(&tok, (int)i), toks[i].c_str()) == 0, "id %zu", i);
        std::string s = printed(&tok, {(int)i});
        CHECK(s == toks[i], "printed id %zu: %zu bytes, want %zu", i, s.size(), toks[i].size());
    }
    // a character split over two tokens prints whole
    std::string s = printed(&tok, {258, 0xF0, 0x9F, 0x99, 0x82, 259});
    CHECK(s == std::string("\xf0\x9f\x99\x82") + "\xf0\x9f\x99\x82" + "\xf0\x9f", "joined bytes");
    tokenizer_free(&tok);

    // no end-of-text token
    std::string p2 = tmp_path("tok_noeot.vptok");
    write_bytes(p2, vptok_bytes({"a", "b"}, -1));
    tokenizer_init(&tok, p2.c_str());
    CHECK(tokenizer_eot(&tok) == -1 && tokenizer_vocab_size(&tok) == 2, "no eot");
    tokenizer_free(&tok);
}

TEST(llmc_tokenizer_file) {
    // llm.c's gpt2_tokenizer.bin layout: uint32 header, then uint8 length + bytes per token
    std::vector<unsigned char> b;
    put_le32(b, LLMC_TOKENIZER_MAGIC);
    put_le32(b, 2);
    put_le32(b, 3);
    put_le32(b, 2);
    while (b.size() < 1024) b.push_back(0);
    const char* toks[] = {"ab", " c", "<|endoftext|>"};
    for (const char* t : toks) {
        b.push_back((unsigned char)strlen(t));
        b.insert(b.end(), t, t + strlen(t));
    }
    std::string p = tmp_path("llmc_tokenizer.bin");
    write_bytes(p, b);
    Tokenizer tok;
    tokenizer_init(&tok, p.c_str());
    CHECK(tokenizer_vocab_size(&tok) == 3 && tokenizer_eot(&tok) == 2, "vocab %d eot %d", tokenizer_vocab_size(&tok), tokenizer_eot(&tok));
    CHECK(strcmp(tokenizer_decode(&tok, 1), " c") == 0, "id 1");
    tokenizer_free(&tok);
    // version 2's end-of-text id must be one of its tokens (as a vptok's): 3 and -2 are refused
    for (int32_t eot : {3, -2}) {
        std::vector<unsigned char> bad = b;
        bad[12] = (unsigned char)(eot & 0xff), bad[13] = bad[14] = bad[15] = eot < 0 ? 0xff : 0;
        std::string q = tmp_path("llmc_tokenizer_bad_eot.bin");
        write_bytes(q, bad);
        Tokenizer t2;
        ErrInfo e = catch_error([&] { tokenizer_init(&t2, q.c_str()); });
        CHECK(e.code == 1 && contains(e.msg, "llmc_tokenizer_bad_eot.bin") && contains(e.msg, "end-of-text id " + std::to_string(eot) + ", outside -1..2"),
              "eot %d: code %d msg '%s'", eot, e.code, e.msg.c_str());
    }
    // version 1 has no end-of-text field: GPT-2's 50256 is assumed, none for these 3 tokens
    std::vector<unsigned char> v1 = b;
    v1[4] = 1;
    v1[12] = 0;
    std::string q = tmp_path("llmc_tokenizer_v1.bin");
    write_bytes(q, v1);
    tokenizer_init(&tok, q.c_str());
    CHECK(tokenizer_vocab_size(&tok) == 3 && tokenizer_eot(&tok) == -1, "version 1 of 3 tokens: vocab %d eot %d", tokenizer_vocab_size(&tok), tokenizer_eot(&tok));
    tokenizer_free(&tok);
}

TEST(small_json_with_escapes) {
    // pretty-printed, every escape GPT-2's alphabet can hold, raw UTF-8 and \u escapes of the same chars
    const char* json =
        "\xef\xbb\xbf{\n"
        "  \"\\\"\" : 0,\n"
        "\t\"\\\\\":1 , \"\\/\": 2,\r\n"
        "  \"\\u0120the\": 3,\n"
        "  \"\xc4\xa0" "and\": 4,\n"           // raw UTF-8 of U+0120
        "  \"\\u010a\\u010A\": 5,\n"        // two newlines
        "  \"<|endoftext|>\": 6,\n"
        "  \"\\u00e9\\u00C3\\u00a9\": 7\n"  // bytes 0xE9 0xC3 0xA9
        "}\n";
    std::string p = tmp_path("small.json");
    write_bytes(p, std::vector<unsigned char>(json, json + strlen(json)));
    Tokenizer tok;
    tokenizer_init(&tok, p.c_str());
    CHECK(tokenizer_vocab_size(&tok) == 8 && tokenizer_eot(&tok) == 6, "vocab %d eot %d", tokenizer_vocab_size(&tok), tokenizer_eot(&tok));
    const char* want[] = {"\"", "\\", "/", " the", " and", "\n\n", "<|endoftext|>", "\xe9\xc3\xa9"};
    for (int i = 0; i < 8; i++) CHECK(strcmp(tokenizer_decode(&tok, i), want[i]) == 0, "id %d: '%s'", i, tokenizer_decode(&tok, i));
    tokenizer_free(&tok);
}

// Writes `bytes` to a file called `name` and loads it as a tokenizer: it must be refused as a
// runtime error (code 1) whose message names the file and says `must_say`.
static void expect_tokenizer_refused(const char* name, const std::vector<unsigned char>& bytes, const char* must_say) {
    std::string p = tmp_path(name);
    write_bytes(p, bytes);
    ErrInfo e = catch_error([&] {
        Tokenizer tok;
        tokenizer_init(&tok, p.c_str());
    });
    CHECK(e.code == 1, "%s: exit code %d (want 1), msg '%s'", name, e.code, e.msg.c_str());
    CHECK(contains(e.msg, name), "%s: message does not name the file: '%s'", name, e.msg.c_str());
    CHECK(contains(e.msg, must_say), "%s: message lacks '%s': '%s'", name, must_say, e.msg.c_str());
}

TEST(tokenizer_errors_name_the_file) {
    std::vector<std::string> toks = test_vocab();
    std::vector<unsigned char> good = vptok_bytes(toks, 3);
    std::vector<unsigned char> truncated(good.begin(), good.end() - 2);
    std::vector<unsigned char> trailing = good;
    trailing.push_back('x');
    std::string text = "hello world, this is not a tokenizer\n";
    struct Case {
        const char* name;
        std::vector<unsigned char> bytes;
        const char* must_say;
    };
    auto str = [](const char* s) { return std::vector<unsigned char>(s, s + strlen(s)); };
    std::vector<Case> cases = {
        {"bad_truncated.vptok", truncated, "truncated: token 262 of 263 has"},
        // the header counts one token more than the file holds: it ends where a length should be
        {"bad_one_short.vptok", vptok_bytes(toks, 3, 1, (int)toks.size() + 1), "truncated: it ends in the length of token 263 of 264"},
        {"bad_header.vptok", std::vector<unsigned char>(good.begin(), good.begin() + 500), "truncated"},
        {"bad_trailing.vptok", trailing, "trailing"},
        {"bad_version.vptok", vptok_bytes(toks, 3, 9), "version 9"},
        {"bad_eot.vptok", vptok_bytes(toks, 100000), "100000"},
        {"bad_eot_n.vptok", vptok_bytes(toks, (int)toks.size()), "end-of-text id 263, outside -1..262"},  // one past the last id
        {"bad_eot_neg.vptok", vptok_bytes(toks, -2), "end-of-text id -2"},
        // refused before the loader reserves room for 2^30 tokens
        {"bad_count.vptok", vptok_bytes(toks, 3, 1, 1 << 30), "cannot hold 1073741824 tokens"},
        // no tokens: without its own check the header's count of 0 reads as trailing garbage
        {"bad_zero_vocab.vptok", vptok_bytes({}, -1, 1, 0), "vocab size 0; it must be at least 1"},
        {"bad_text.txt", str(text.c_str()), "not a tokenizer file"},
        {"bad_empty.json", {}, "empty"},
        {"bad_hf.json", str("{\n  \"version\": \"1.0\",\n  \"model\": {}\n}\n"), "line 2"},
        {"bad_cut.json", str("{\"a\": 0, \"b\": 1, \"c"), "unterminated"},
        {"bad_array.json", str("[\"a\", \"b\"]"), "not a tokenizer file"},
        {"bad_dup.json", str("{\"a\": 0, \"b\": 0}"), "used twice"},
        {"bad_gap.json", str("{\"a\": 0, \"b\": 2}"), "out of range"},
        {"bad_surrogate.json", str("{\"a\": 0, \"\\ud83d\\ude42\": 1}"), "U+1F642"},
        {"bad_lone_surrogate.json", str("{\"a\": 0, \"\\ud83d\": 1}"), "surrogate"},
        {"bad_raw_newline.json", str("{\"a\n\": 0}"), "control character"},
        {"bad_escape_n.json", str("{\"\\n\": 0}"), "U+000A"},
        {"bad_float.json", str("{\"a\": 0.5}"), "not an integer"},
        {"bad_negative.json", str("{\"a\": -1}"), "non-negative"},
        {"bad_after.json", str("{\"a\": 0} x"), "after the JSON object"},
    };
    for (const Case& c : cases) expect_tokenizer_refused(c.name, c.bytes, c.must_say);
    ErrInfo e = catch_error([&] {
        Tokenizer tok;
        tokenizer_init(&tok, (tmp_dir() + "/no_such_tokenizer.json").c_str());
    });
    CHECK(e.code == 1 && contains(e.msg, "no_such_tokenizer.json"), "missing file: code %d '%s'", e.code, e.msg.c_str());
}

// ----------------------------------------------------------------------------
// the prompt encoder (host/tokenizer.h tokenizer_encode); tests/python/test_prompt_encode.py diffs
// it against tiktoken, HF tokenizers and sentencepiece on real text

static std::vector<std::string> pretokenized(const std::string& text) {
    std::vector<uint32_t> cps;
    std::vector<size_t> starts;
    std::vector<std::pair<size_t, size_t>> pieces;
    if (!utf8_decode(text, &cps, &starts)) return {"<invalid>"};
    gpt2_pretokenize(cps, 0, cps.size(), &pieces);
    std::vector<std::string> out;
    for (auto& p : pieces) out.push_back(text.substr(starts[p.first], starts[p.second] - starts[p.first]));
    return out;
}

TEST(gpt2_pretokenizer_by_hand) {
    // each expectation worked out from the regex
    //   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
    // by taking, at each position, the first alternative that matches
    struct Case { std::string text; std::vector<std::string> want; } cases[] = {
        {"Hello world's 123!!  ok\n", {"Hello", " world", "'s", " 123", "!!", " ", " ok", "\n"}},
        {"don't we'll 'LL", {"don", "'t", " we", "'ll", " '", "LL"}},  // contractions are lower case only
        {"a\n\nb", {"a", "\n", "\n", "b"}},        // \s+(?!\S) leaves the last \n, which \s+ then takes alone
        {"  \t x", {"  \t", " x"}},               // a run's last space goes with the word after it
        {"x   ", {"x", "   "}},                   // at the end the whole run is one piece
        {"1,000.5", {"1", ",", "000", ".", "5"}},
        {"\xe6\x97\xa5\xe6\x9c\xac x\xc2\xb2\xc2\xbd", {"\xe6\x97\xa5\xe6\x9c\xac", " x", "\xc2\xb2\xc2\xbd"}},  // 日本 x²½: ² ½ are \p{N}
        {"a\xc2\xa0" "b", {"a", "\xc2\xa0", "b"}},  // NBSP is \s but not the optional ' '
        {"e\xcc\x81t\xc3\xa9", {"e", "\xcc\x81", "t\xc3\xa9"}},  // a combining mark (Mn) is neither L nor N
        {" ", {" "}},
        {"", {}},
    };
    for (const Case& c : cases) {
        std::vector<std::string> got = pretokenized(c.text);
        std::string shown;
        for (auto& g : got) shown += "[" + g + "]";
        CHECK(got == c.want, "'%s' cuts into %s", c.text.c_str(), shown.c_str());
    }
    // strict UTF-8: malformed, overlong, surrogate and beyond U+10FFFF are refused
    for (const char* bad : {"\xff", "\xc0\x80", "\xed\xa0\x80", "\xe2\x96", "\xf4\x90\x80\x80", "a\x80"})
        CHECK(pretokenized(bad) == std::vector<std::string>{"<invalid>"}, "'%s' decoded", bad);
    CHECK(unicode_letter(0x4E2D) && unicode_number(0x0660) && unicode_space(0x3000) && !unicode_space(0x1C) && !unicode_letter(0x301),
          "class tables");
}

// int32 header slot `slot` of a vptok file (little-endian)
static void set_header_slot(std::vector<unsigned char>& file, int slot, int32_t v) {
    for (int k = 0; k < 4; k++) file[4 * slot + k] = (unsigned char)((uint32_t)v >> (8 * k));
}

// vptok version 2 with a byte-level BPE encoder: header slots 4..6, the triples, the added ids
static std::vector<unsigned char> vptok_bpe_bytes(const std::vector<std::string>& toks, const std::vector<std::array<int, 3>>& merges,
                                                   const std::vector<int>& added, int kind = ENCODER_BYTE_BPE, int flags = 0) {
    std::vector<unsigned char> b = vptok_bytes(toks, -1, 2);
    set_header_slot(b, 4, kind);
    set_header_slot(b, 7, flags);
    set_header_slot(b, 5, (int32_t)merges.size());
    set_header_slot(b, 6, (int32_t)added.size());
    for (auto& m : merges)
        for (int v : m) put_le32(b, (uint32_t)v);
    for (int a : added) put_le32(b, (uint32_t)a);
    return b;
}

static std::vector<int> encoded(const std::string& path, const std::string& text) {
    Tokenizer tok;
    tokenizer_init(&tok, path.c_str());
    std::vector<int> ids;
    if (!tokenizer_can_encode(&tok) || !tokenizer_encode(&tok, text, &ids)) ids = {-99};
    tokenizer_free(&tok);
    return ids;
}

static std::vector<std::string> byte_vocab() {
    std::vector<std::string> toks;
    for (int b = 0; b < 256; b++) toks.push_back(std::string(1, (char)b));
    return toks;
}

TEST(nfc_by_hand) {
    // each worked out from UAX #15 and the Unicode data: decompose fully, order the marks by
    // combining class, compose each with the last starter unless a mark between blocks it
    auto nfc = [](const std::string& text) {
        std::vector<uint32_t> cps;
        std::vector<size_t> starts;
        if (!utf8_decode(text, &cps, &starts)) return std::string("<invalid>");
        return utf8_encode(unicode_nfc(cps));
    };
    struct Case { const char* what; std::string text, want; } cases[] = {
        {"e + acute composes", "e\xcc\x81", "\xc3\xa9"},
        {"a + dot below (220) + circumflex (230): one letter", "a\xcc\xa3\xcc\x82", "\xe1\xba\xad"},
        {"the same marks out of class order: reordered, then composed", "a\xcc\x82\xcc\xa3", "\xe1\xba\xad"},
        {"a second mark of the same class is blocked", "e\xcc\x80\xcc\x81", "\xc3\xa8\xcc\x81"},
        {"Angstrom sign: a singleton, becomes A with ring", "\xe2\x84\xab", "\xc3\x85"},
        {"Hangul L + V + T jamo: one syllable", "\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", "\xea\xb0\x81"},
        {"U+0958 is excluded from composition: stays decomposed", "\xe0\xa5\x98", "\xe0\xa4\x95\xe0\xa4\xbc"},
        {"a leading mark has nothing to join", "\xcc\x81" "e", "\xcc\x81" "e"},
        {"ASCII is untouched", "plain text 123", "plain text 123"},
        {"empty", "", ""},
    };
    for (const Case& c : cases) CHECK(nfc(c.text) == c.want, "%s: got '%s'", c.what, nfc(c.text).c_str());
    // the flag of a byte-level BPE file: e + U+0301 merges to the token of "é" only under NFC
    std::vector<std::string> toks = byte_vocab();
    toks.push_back("\xc3\xa9");  // 256
    std::string with = tmp_path("nfc_bpe.vptok"), without = tmp_path("plain_bpe.vptok");
    write_bytes(with, vptok_bpe_bytes(toks, {{0xC3, 0xA9, 256}}, {}, ENCODER_BYTE_BPE, 1));
    write_bytes(without, vptok_bpe_bytes(toks, {{0xC3, 0xA9, 256}}, {}));
    CHECK(encoded(with, "e\xcc\x81") == std::vector<int>{256}, "NFC flag: e + U+0301 is not the token of é");
    CHECK(encoded(without, "e\xcc\x81") == (std::vector<int>{'e', 0xCC, 0x81}), "no flag: e + U+0301 must stay three bytes");
}

TEST(byte_bpe_encode_by_hand) {
    std::vector<std::string> toks = byte_vocab();
    toks.insert(toks.end(), {"ab", "abc", "bc", "  "});  // 256, 257, 258; 259 is an added token
    // ranks: a+b first, then ab+c, then b+c
    std::string p = tmp_path("bpe.vptok");
    write_bytes(p, vptok_bpe_bytes(toks, {{'a', 'b', 256}, {256, 'c', 257}, {'b', 'c', 258}}, {259}));
    struct Case { std::string text; std::vector<int> want; } cases[] = {
        {"abc", {257}},                   // a+b (rank 0) before b+c (rank 2), then ab+c
        {"bcab", {258, 256}},             // a+b first, then b+c
        {"aab b", {'a', 256, ' ', 'b'}},  // pieces "aab" and " b" merge apart
        {"x  y", {'x', 259, 'y'}},        // the added "  " is cut out before the regex
        {"x   y", {'x', 259, ' ', 'y'}},  // leftmost first: "  " at 1, then " y"
        {"", {}},
    };
    for (const Case& c : cases) {
        std::vector<int> got = encoded(p, c.text);
        CHECK(got == c.want, "'%s': %zu ids, first %d", c.text.c_str(), got.size(), got.empty() ? -1 : got[0]);
    }
    Tokenizer tok;
    tokenizer_init(&tok, p.c_str());
    std::vector<int> ids = {7};
    CHECK(!tokenizer_encode(&tok, "ab\xff", &ids) && ids == std::vector<int>{7}, "invalid UTF-8 is refused, ids untouched");
    tokenizer_free(&tok);
    // a version 1 file decodes only, and says so
    std::string p1 = tmp_path("bpe_v1.vptok");
    write_bytes(p1, vptok_bytes(toks, -1, 1));
    tokenizer_init(&tok, p1.c_str());
    CHECK(!tokenizer_can_encode(&tok) && contains(tok.encoder_missing, "version 1"), "v1: '%s'", tok.encoder_missing.c_str());
    tokenizer_free(&tok);
}

TEST(sentencepiece_encode_by_hand) {
    // <unk> <s> </s>, the 256 byte pieces, then normal pieces ("▁" is stored as a space)
    std::vector<std::string> toks = {"<unk>", "<s>", "</s>"};
    std::vector<int> types = {SP_UNKNOWN, SP_CONTROL, SP_CONTROL};
    for (int b = 0; b < 256; b++) toks.push_back(std::string(1, (char)b)), types.push_back(SP_BYTE);
    const int byte0 = 3, sp = 259, a = 260, bb = 261, sp_a = 262, ab = 263, aa = 264;
    std::vector<std::pair<std::string, float>> normal = {{" ", -1}, {"a", -2}, {"b", -3}, {" a", -0.5f}, {"ab", -0.1f}, {"aa", -0.2f}};
    std::vector<float> scores(toks.size(), 0.0f);
    for (auto& n : normal) toks.push_back(n.first), types.push_back(SP_NORMAL), scores.push_back(n.second);
    std::vector<unsigned char> file = vptok_bytes(toks, 1, 2);
    set_header_slot(file, 4, ENCODER_SENTENCEPIECE);
    set_header_slot(file, 7, 1);  // add_dummy_prefix
    set_header_slot(file, 8, 0);  // unk
    for (size_t i = 0; i < toks.size(); i++) {
        uint32_t bits;
        memcpy(&bits, &scores[i], 4);
        put_le32(file, bits);
        put_le32(file, (uint32_t)types[i]);
    }
    std::string p = tmp_path("spm.vptok");
    write_bytes(p, file);
    struct Case { std::string text; std::vector<int> want; } cases[] = {
        {"ab", {sp, ab}},                  // " ab": "ab" (-0.1) beats " a" (-0.5); " ab" is no piece
        {"ba", {sp, bb, a}},               // " b" and "ba" are no pieces
        {"aaa", {sp, aa, a}},              // "aa" twice at the same score: the leftmost merges
        {"a\xc3\xa9", {sp_a, byte0 + 0xC3, byte0 + 0xA9}},  // é is no piece: its UTF-8 bytes
        {"\xe2\x96\x81" "a", {sp, sp_a}},  // a literal U+2581 is a space
        {"<s>", {sp, byte0 + '<', byte0 + 's', byte0 + '>'}},  // control pieces never match text
        {"", {}},
    };
    for (const Case& c : cases) {
        std::vector<int> got = encoded(p, c.text);
        std::string shown;
        for (int id : got) shown += std::to_string(id) + " ";
        CHECK(got == c.want, "'%s' encodes to %s", c.text.c_str(), shown.c_str());
    }
}

// Byte-level BPE starts each byte at the first one-byte token for it (host/tokenizer.h,
// tok_find_byte_tokens): a second token of the same byte (id 256 here, an odd file) is never
// the start, so the merge a + b -> ab, stated on the first 'a' (97), still applies.
TEST(byte_bpe_starts_from_the_first_token_of_a_byte) {
    std::vector<std::string> toks = byte_vocab();
    toks.insert(toks.end(), {"a", "ab"});  // 256: 'a' again; 257: "ab"
    std::string p = tmp_path("bpe_dup_byte.vptok");
    write_bytes(p, vptok_bpe_bytes(toks, {{'a', 'b', 257}}, {}));
    CHECK(encoded(p, "ab") == std::vector<int>{257}, "'ab' must merge from the first 'a'");
    CHECK(encoded(p, "ba") == (std::vector<int>{'b', 'a'}), "'a' alone is id 97, not 256");
}

// SentencePiece without byte pieces: a character that is no piece becomes one unk, however many
// UTF-8 bytes it has (sentencepiece's BPE without byte_fallback: one unk per unknown symbol).
TEST(sentencepiece_unk_is_one_per_character) {
    std::vector<std::string> toks = {"<unk>", " ", "a"};
    std::vector<int> types = {SP_UNKNOWN, SP_NORMAL, SP_NORMAL};
    std::vector<unsigned char> file = vptok_bytes(toks, -1, 2);
    set_header_slot(file, 4, ENCODER_SENTENCEPIECE);
    set_header_slot(file, 7, 1);  // add_dummy_prefix
    set_header_slot(file, 8, 0);  // unk
    for (int ty : types) put_le32(file, 0), put_le32(file, (uint32_t)ty);
    std::string p = tmp_path("spm_no_bytes.vptok");
    write_bytes(p, file);
    // " a é 日" with pieces " " and "a": é (2 bytes) and 日 (3 bytes) are one unk each
    CHECK(encoded(p, "a\xc3\xa9\xe6\x97\xa5") == (std::vector<int>{1, 2, 0, 0}), "two unknown characters, two unks");
    CHECK(encoded(p, "\xf0\x9f\x99\x82") == (std::vector<int>{1, 0}), "a 4-byte character is one unk");
}

TEST(encoder_section_errors_name_the_file) {
    std::vector<std::string> toks = byte_vocab();
    toks.insert(toks.end(), {"ab", "xy"});
    std::vector<unsigned char> good = vptok_bpe_bytes(toks, {{'a', 'b', 256}}, {});
    std::vector<unsigned char> cut(good.begin(), good.end() - 1), trailing = good;
    trailing.push_back(0);
    std::vector<std::string> no_b = byte_vocab();
    no_b['b'] = "";  // no one-byte token for 'b'
    // SentencePiece sections
    auto spm = [&](const std::vector<std::string>& t, const std::vector<int>& types) {
        std::vector<unsigned char> b = vptok_bytes(t, -1, 2);
        set_header_slot(b, 4, ENCODER_SENTENCEPIECE);
        set_header_slot(b, 8, -1);  // no unk
        for (int ty : types) put_le32(b, 0), put_le32(b, (uint32_t)ty);
        return b;
    };
    struct Case { const char* name; std::vector<unsigned char> bytes; const char* must_say; } cases[] = {
        {"enc_kind.vptok", vptok_bpe_bytes(toks, {}, {}, 3), "encoder kind 3"},
        {"enc_flags.vptok", vptok_bpe_bytes(toks, {}, {}, ENCODER_BYTE_BPE, 2), "encoder flags 0x2"},
        {"enc_cut.vptok", cut, "truncated"},
        {"enc_trailing.vptok", trailing, "trailing"},
        {"enc_join.vptok", vptok_bpe_bytes(toks, {{'a', 'b', 257}}, {}), "not their bytes joined"},
        {"enc_range.vptok", vptok_bpe_bytes(toks, {{'a', 999, 256}}, {}), "outside 0..257"},
        {"enc_repeat.vptok", vptok_bpe_bytes(toks, {{'a', 'b', 256}, {'a', 'b', 256}}, {}), "repeats the pair"},
        {"enc_added.vptok", vptok_bpe_bytes(toks, {}, {5000}), "added token 0 is id 5000"},
        {"enc_counts.vptok", [&] { std::vector<unsigned char> b = vptok_bpe_bytes(toks, {}, {}); set_header_slot(b, 5, -1); return b; }(),
         "-1 merges and 0 added tokens; impossible counts"},
        {"enc_nobyte.vptok", vptok_bpe_bytes(no_b, {}, {}), "no token for the byte 0x62"},
        {"spm_type.vptok", spm({"a", "b"}, {SP_NORMAL, 9}), "type 9"},
        {"spm_byte.vptok", spm({"a", "a"}, {SP_BYTE, SP_BYTE}), "both stand for the byte 0x61"},
        {"spm_dup.vptok", spm({"ab", "ab"}, {SP_NORMAL, SP_NORMAL}), "same bytes"},
        {"spm_unk.vptok", [&] { std::vector<unsigned char> b = spm({"a", "b"}, {SP_NORMAL, SP_NORMAL}); set_header_slot(b, 8, 5); return b; }(),
         "unk id 5, outside -1..1"},
        {"spm_empty.vptok", spm({"", "b"}, {SP_NORMAL, SP_NORMAL}), "piece 0 is empty"},
        {"spm_long_byte.vptok", spm({"ab", "c"}, {SP_BYTE, SP_NORMAL}), "byte piece 0 is 2 bytes long, not 1"},
    };
    for (const Case& c : cases) expect_tokenizer_refused(c.name, c.bytes, c.must_say);
    // user-defined pieces: SentencePiece matches them whole, this encoder does not; decode only
    std::string ud = tmp_path("spm_user_defined.vptok");
    write_bytes(ud, spm({"a", "<x>"}, {SP_NORMAL, SP_USER_DEFINED}));
    Tokenizer tok;
    tokenizer_init(&tok, ud.c_str());
    CHECK(tokenizer_vocab_size(&tok) == 2 && !tokenizer_can_encode(&tok) && contains(tok.encoder_missing, "user-defined"),
          "user-defined pieces: '%s'", tok.encoder_missing.c_str());
    tokenizer_free(&tok);
}

// ----------------------------------------------------------------------------
// data-parallel shard layout (host/distributed.h)

// ZeRO-1 and the CPU build's reduce-scatter cut the flat parameter vector with dist_shard; the GPU
// build's in-place all-gather relies on every shard but the last being one full slot at r * slot.
// Checked against the layout written out here element by element: each element's owner is
// i / slot, so shard r is exactly the elements whose owner is r.
TEST(dist_shard_tiles_the_vector_in_slots) {
    for (size_t n : {0ul, 1ul, 2ul, 3ul, 7ul, 8ul, 10ul, 1000ul, 124475904ul})
        for (int W : {1, 2, 3, 4, 7, 8, 16}) {
            size_t slot = (n + W - 1) / W, covered = 0;
            CHECK(dist_slot(n, W) == slot, "n=%zu W=%d: slot %zu, want %zu", n, W, dist_slot(n, W), slot);
            for (int r = 0; r < W; r++) {
                DistShard s = dist_shard(n, r, W);
                CHECK(s.offset == covered, "n=%zu W=%d r=%d: offset %zu, want %zu (contiguous)", n, W, r, s.offset, covered);
                size_t want = 0;  // elements i < n with i / slot == r
                if (slot && (size_t)r * slot < n) want = std::min(n, (size_t)(r + 1) * slot) - (size_t)r * slot;
                CHECK(s.count == want, "n=%zu W=%d r=%d: count %zu, want %zu", n, W, r, s.count, want);
                if (s.count) CHECK(s.offset == (size_t)r * slot, "n=%zu W=%d r=%d: a non-empty shard must start at r * slot", n, W, r);
                covered += s.count;
            }
            CHECK(covered == n, "n=%zu W=%d: the shards cover %zu elements", n, W, covered);
        }
}

// The parts of a slice by owner (ZeRO-1's reduce of each gradient slice to the rank that holds
// it): for every slice of a small vector, each element must appear in exactly one part, that of
// the rank whose dist_shard contains it, with the parts in rank order and none empty.
TEST(dist_owner_parts_match_the_shards) {
    for (size_t n : {1ul, 5ul, 12ul, 13ul})
        for (int W : {1, 2, 3, 5})
            for (size_t a = 0; a < n; a++)
                for (size_t count = 0; a + count <= n; count++) {
                    std::vector<int> owner(count, -1);
                    int last_rank = -1;
                    bool ok = true;
                    dist_for_each_owner_part(a, count, n, W, [&](int r, size_t at, size_t part) {
                        ok = ok && part > 0 && r > last_rank && at + part <= count;
                        last_rank = r;
                        for (size_t j = at; j < at + part && j < count; j++) ok = ok && owner[j] == -1, owner[j] = r;
                    });
                    for (size_t j = 0; j < count; j++) {
                        DistShard s = dist_shard(n, owner[j] < 0 ? 0 : owner[j], W);
                        ok = ok && owner[j] >= 0 && a + j >= s.offset && a + j < s.offset + s.count;
                    }
                    CHECK(ok, "n=%zu W=%d slice [%zu, %zu): parts do not match the shards", n, W, a, a + count);
                }
}

// The CPU build's reduce-scatter and all-gather at Llama-3-8B's size, 8,030,261,248 floats: one
// MPI call would need displacements past 2^31 (MPI's are int) even where each rank's count fits,
// so they move in pieces. Each rank's part of each piece must count at most `piece` (an int), begin
// where the rank's shard has been covered to, and the parts must cover every shard exactly once.
// A vector that fits (GPT-2 124M over 8 ranks) keeps the single call and its int layout; the
// layout of one that does not is refused, never cast. Nothing is allocated.
TEST(dist_pieces_tile_an_8e9_vector_in_int_counts) {
    std::vector<int> count, displ;
    CHECK(dist_piece_floats(124475904, 8) == 0, "GPT-2 124M over 8 ranks is one call");
    dist_shard_layout(124475904, 8, &count, &displ);
    for (int j = 0; j < 8; j++) {
        DistShard s = dist_shard(124475904, j, 8);
        CHECK((size_t)count[j] == s.count && (size_t)displ[j] == s.offset, "rank %d: %d at %d", j, count[j], displ[j]);
    }
    const size_t n = 8030261248ull;
    ErrInfo e = catch_error([&] { dist_shard_layout(n, 8, &count, &displ); });
    CHECK(e.code == 1 && contains(e.msg, "int"), "a layout past 2^31 is refused, not cast: code %d '%s'", e.code, e.msg.c_str());
    CHECK(dist_piece_floats(2147483647ull, 1) == 0 && dist_piece_floats(2147483648ull, 1) > 0, "one rank: the limit is 2^31-1 floats");
    for (int W : {2, 8, 64, 1024}) {
        size_t piece = dist_piece_floats(n, W), slot = dist_slot(n, W), total = 0;
        CHECK(piece >= 1 && piece <= DIST_MAX_COUNT && piece * W <= ((size_t)1 << 28), "W=%d: piece %zu", W, piece);
        if (!piece) continue;
        std::vector<size_t> reached(W);  // how far each rank's shard is covered
        for (int j = 0; j < W; j++) reached[j] = dist_shard(n, j, W).offset;
        bool ok = true;
        for (size_t q = 0; q < slot; q += piece)
            for (int j = 0; j < W; j++) {
                DistShard part = dist_piece_part(n, j, W, q, piece);
                if (!part.count) continue;
                ok = ok && part.count <= piece && part.offset == reached[j];
                reached[j] += part.count;
                total += part.count;
            }
        for (int j = 0; j < W; j++) {
            DistShard s = dist_shard(n, j, W);
            ok = ok && reached[j] == s.offset + s.count;
        }
        CHECK(ok && total == n, "W=%d: the pieces of %zu cover %zu of %zu elements, or not each shard exactly", W, piece, total, n);
    }
    // forced pieces (VP_DIST_PIECE) on small vectors: every element in exactly one part, its owner's
    CHECK(dist_piece_floats(1000, 3, 7) == 7, "a forced piece length is taken whatever n is");
    for (size_t n_small : {1ul, 5ul, 12ul, 13ul, 100ul})
        for (int W : {1, 2, 3, 5})
            for (size_t piece : {1ul, 2ul, 3ul, 7ul}) {
                std::vector<int> owner(n_small, -1);
                bool ok = true;
                for (size_t q = 0; q < dist_slot(n_small, W); q += piece)
                    for (int j = 0; j < W; j++) {
                        DistShard part = dist_piece_part(n_small, j, W, q, piece);
                        for (size_t i = part.offset; i < part.offset + part.count; i++) {
                            if (i >= n_small || owner[i] != -1) ok = false;
                            else owner[i] = j;
                        }
                    }
                for (size_t i = 0; i < n_small; i++) {
                    DistShard s = dist_shard(n_small, owner[i] < 0 ? 0 : owner[i], W);
                    ok = ok && owner[i] >= 0 && i >= s.offset && i < s.offset + s.count;
                }
                CHECK(ok, "n=%zu W=%d piece=%zu: the parts do not tile the shards", n_small, W, piece);
            }
}

// dist_share_cores' count (host/distributed.h dist_cpu_share): the OpenMP threads a rank takes
// when the node's ranks' CPU masks overlap, worked by hand, on masks made with glibc's own CPU_SET_S
// (the layout sched_getaffinity writes), past cpu_set_t's 1024 CPUs where a node has more.
TEST(dist_cpu_share_splits_shared_cpus_by_hand) {
    const size_t cpus = 3072, words = cpus / CPU_MASK_WORD_BITS, bytes = words * sizeof(unsigned long);
    auto mask = [&](std::initializer_list<std::pair<size_t, size_t>> ranges) {  // [lo, hi) CPU ranges
        CpuMask m(words, 0);
        for (auto [lo, hi] : ranges)
            for (size_t c = lo; c < hi; c++) CPU_SET_S(c, bytes, reinterpret_cast<cpu_set_t*>(m.data()));
        return m;
    };
    auto share = [&](std::vector<CpuMask> node, int r) {
        std::vector<unsigned long> all;
        for (const CpuMask& m : node) all.insert(all.end(), m.begin(), m.end());
        return dist_cpu_share(node[r].data(), all.data(), (int)node.size(), words);
    };
    // glibc's macros and cpu_mask_has agree on every bit
    CpuMask odd = mask({{1, 2}, {63, 65}, {1023, 1025}, {3071, 3072}});
    for (size_t c = 0; c < cpus; c++)
        CHECK(cpu_mask_has(odd.data(), words, c) == (bool)CPU_ISSET_S(c, bytes, reinterpret_cast<const cpu_set_t*>(odd.data())), "CPU %zu", c);
    CHECK(!cpu_mask_has(odd.data(), words, cpus), "a CPU past the mask is not in it");
    CpuMask low = mask({{0, 4}}), shifted = mask({{2, 6}}), high = mask({{1030, 1034}}), whole = mask({{0, 3000}});
    CHECK(share({low, low}, 0) == 2 && share({low, low}, 1) == 2, "2 ranks on the same 4 CPUs: 2 threads each");
    CHECK(share({low, shifted}, 0) == 3 && share({low, shifted}, 1) == 3, "4 CPUs, 2 of them shared: 2 + 2 x 1/2 = 3");
    CHECK(share({low, high}, 0) == 4 && share({low, high}, 1) == 4, "disjoint masks: a thread per CPU");
    CHECK(share({high, high, high, high}, 3) == 1, "4 ranks on CPUs 1030-1033 (past cpu_set_t): 1 each");
    CHECK(share({whole, whole, whole}, 1) == 1000, "3 ranks on 3000 CPUs: 1000 each, not %d", share({whole, whole, whole}, 1));
    CHECK(share({whole, low, low}, 0) == 2997, "CPUs 0-3 held by 3 ranks, 4-2999 by rank 0 alone: 2996 + 4/3, rounded down");
    CHECK(share({low, low, low, low, low, low}, 5) == 1, "6 ranks on 4 CPUs: at least 1 thread");
}

// The settings read from the environment: unset or empty gives the default, a number in range is
// taken, and a typo, trailing junk, an overflow or a value out of range is a usage error that
// names the variable (VP_DIST_TIMEOUT=1O must not silently switch the hang detector off).
TEST(env_number_refuses_what_is_not_a_number_in_range) {
    const char* name = "VP_TEST_ENV_NUMBER";
    unsetenv(name);
    CHECK(env_number(name, 600, 0, 1e7) == 600, "unset: the default");
    setenv(name, "", 1);
    CHECK(env_number(name, 600, 0, 1e7) == 600, "empty: the default");
    setenv(name, "2.5", 1);
    CHECK(env_number(name, 600, 0, 1e7) == 2.5, "a number");
    setenv(name, "0", 1);
    CHECK(env_number(name, 600, 0, 1e7) == 0, "the low end");
    for (const char* bad : {"1O", "fast", "3 ", "1e999", "-1", "2e7", "nan"}) {
        setenv(name, bad, 1);
        ErrInfo e = catch_error([&] { env_number(name, 600, 0, 1e7); });
        CHECK(e.code == VP_EXIT_USAGE && contains(e.msg, std::string(name) + "='" + bad + "'") && contains(e.msg, "from 0 to 1e+07"),
              "%s: code %d, '%s'", bad, e.code, e.msg.c_str());
    }
    unsetenv(name);
}

// A tensor's own peak learning rate follows the schedule scaled to it, and 0 is a rate like any
// other: --resformer-lambda-lr 0 froze nothing until 2026-12-01, when own_lr 0 still meant "use
// --lr" and the lambdas trained at the model's rate (found by dev/reference/fuzz_states.py).
TEST(own_learning_rate_zero_freezes_the_tensor) {
    AdamWSettings s = {};
    s.lr = 3e-4f;       // this step's scheduled lr
    s.lr_peak = 6e-4f;  // --lr
    ParamSpec plain = {"w", 4, 1, 0.02, 0};
    ParamSpec own = {"vp_lambda", 4, 0, 0, 0.5f, 0.02f};
    ParamSpec frozen = {"vp_lambda", 4, 0, 0, 0.5f, 0.0f};
    CHECK(tensor_lr(plain, s) == s.lr, "no own lr: %g", tensor_lr(plain, s));
    CHECK(tensor_lr(own, s) == 0.02f * (s.lr / s.lr_peak), "own lr 0.02 at half the peak: %g", tensor_lr(own, s));
    CHECK(tensor_lr(frozen, s) == 0.0f, "own lr 0: %g", tensor_lr(frozen, s));
}

// What a flag or environment variable holds is read as a person types it: hexadecimal ("0x10",
// which strtod reads as 16), infinities, NaN and leading blanks are refused, not turned into a
// learning rate of 16.
TEST(decimal_numbers_only) {
    struct Case { const char* text; double value; } good[] = {
        {"3e-4", 3e-4}, {"0.1", 0.1}, {".5", 0.5}, {"5.", 5.0}, {"-2", -2.0}, {"+1E3", 1000.0}, {"6e+0", 6.0}, {"0", 0.0}};
    for (const Case& c : good) {
        double v = -1;
        CHECK(parse_decimal_number(c.text, &v) && v == c.value, "'%s' read as %g", c.text, v);
    }
    for (const char* bad : {"0x10", "0X1p4", "inf", "-infinity", "nan", " 1", "1 ", "", ".", "-", "e5", "1e", "1e+", "1.2.3", "1,5", "--1"}) {
        double v = -1;
        CHECK(!parse_decimal_number(bad, &v) && v == -1, "'%s' accepted as %g", bad, v);
    }
    long n = 0;
    CHECK(parse_long_strict("1e6", &n) && n == 1000000, "1e6 as an integer: %ld", n);
    for (const char* bad : {"0x10", " 5", "1.5", "1e6 ", "0x1p4"})
        CHECK(!parse_long_strict(bad, &n), "'%s' accepted as an integer", bad);
}

// The statistics update_guard_step should hold after the values x: for the first W, the plain
// mean and population variance (two passes, long double); past W, mean_n = (1-a) mean_{n-1} + a x_n
// and var_n = (1-a)(var_{n-1} + a (x_n - mean_{n-1})^2) with a = 1/W, from the exact first W.
static void guard_reference_stats(const std::vector<double>& x, int W, double* mean, double* var) {
    size_t head = std::min(x.size(), (size_t)W);
    long double m = 0, q = 0;
    for (size_t i = 0; i < head; i++) m += x[i];
    m /= head;
    for (size_t i = 0; i < head; i++) q += (x[i] - m) * (x[i] - m);
    double mm = (double)m, vv = (double)(q / head);
    for (size_t i = head; i < x.size(); i++) {
        double a = 1.0 / W, d = x[i] - mm;
        vv = (1 - a) * (vv + a * d * d);
        mm = mm + a * d;
    }
    *mean = mm;
    *var = vv;
}

// The guard's statistics against a direct computation: for the first W values the plain mean and
// population variance of all of them (two passes, in long double), after that the exponential
// average with weight 1/W, computed from its definition as a weighted sum over the whole history.
// No verdict before W values; after, z against the statistics of the values before the step.
TEST(update_guard_statistics_and_verdicts) {
    const int W = 8;
    UpdateGuardSettings g;
    g.loss_z = 3.0;
    g.norm_z = 2.5;
    g.window = W;
    UpdateGuardState s{};
    std::vector<double> losses, norms;
    Rng rng = rng_stream(7, 0);
    for (int n = 1; n <= 40; n++) {
        double loss = 3.0 + 0.1 * rng_uniform(&rng), norm = 0.5 + 0.05 * rng_uniform(&rng);
        if (n == 20) loss = 9.0;  // a spike in the loss only
        if (n == 30) norm = 5.0;  // and one in the norm only
        UpdateGuardState before = s;
        UpdateGuardVerdict v = update_guard_step(&s, g, loss, norm);
        CHECK(v.judged == (n > W), "step %d judged %d", n, (int)v.judged);
        if (n > W) {
            double zl = (loss - before.loss_mean) / std::sqrt(before.loss_var), zn = (norm - before.norm_mean) / std::sqrt(before.norm_var);
            CHECK(std::fabs(v.loss_z - zl) < 1e-12 * std::max(1.0, std::fabs(zl)) && std::fabs(v.norm_z - zn) < 1e-12 * std::max(1.0, std::fabs(zn)),
                  "step %d z", n);
            CHECK(v.skip_for_loss == (n == 20) && v.skip_for_norm == (n == 30), "step %d: skip loss %d norm %d (z %.2f %.2f)", n,
                  (int)v.skip_for_loss, (int)v.skip_for_norm, v.loss_z, v.norm_z);
        } else {
            CHECK(!v.skip(), "step %d skipped before the window filled", n);
        }
        losses.push_back(loss);
        norms.push_back(norm);
        double lm, lv, nm, nv;
        guard_reference_stats(losses, W, &lm, &lv);
        guard_reference_stats(norms, W, &nm, &nv);
        CHECK(std::fabs(s.loss_mean - lm) < 1e-12 * std::fabs(lm) && std::fabs(s.loss_var - lv) < 1e-9 * lv + 1e-15, "step %d loss stats %.17g %.17g vs %.17g %.17g", n,
              s.loss_mean, s.loss_var, lm, lv);
        CHECK(std::fabs(s.norm_mean - nm) < 1e-12 * std::fabs(nm) && std::fabs(s.norm_var - nv) < 1e-9 * nv + 1e-15, "step %d norm stats", n);
    }
    CHECK(s.seen == 40 && s.skipped == 2, "seen %lld skipped %lld", (long long)s.seen, (long long)s.skipped);
    // only the tests that are on: the loss test off, the same norm spike is still caught, the loss one not
    UpdateGuardSettings norm_only = g;
    norm_only.loss_z = 0;
    UpdateGuardState t{};
    for (size_t i = 0; i < losses.size(); i++) {
        UpdateGuardVerdict v = update_guard_step(&t, norm_only, losses[i], norms[i]);
        CHECK(v.skip() == (i + 1 == 30), "norm only, step %zu", i + 1);
    }
    // constant values: a variance of 0 judges nothing (z = 0), whatever comes next
    UpdateGuardState c{};
    for (int n = 1; n <= W; n++) update_guard_step(&c, g, 2.0, 1.0);
    UpdateGuardVerdict v = update_guard_step(&c, g, 100.0, 100.0);
    CHECK(v.judged && !v.skip() && v.loss_z == 0 && v.norm_z == 0, "after constant values");
}

// "More than Z standard deviations": a z exactly at the threshold is not an outlier. With W = 2
// the values 1 and 3 have mean 2 and population variance 1 (worked by hand), so a third value of
// 5 is exactly 3 sd above the mean and 5.001 is just over it; the norm test likewise.
TEST(update_guard_threshold_is_strict) {
    UpdateGuardSettings g;
    g.loss_z = 3.0;
    g.norm_z = 3.0;
    g.window = 2;
    for (int over = 0; over < 2; over++) {
        UpdateGuardState s{};
        update_guard_step(&s, g, 1.0, 1.0);
        update_guard_step(&s, g, 3.0, 3.0);
        CHECK(s.loss_mean == 2.0 && s.loss_var == 1.0 && s.norm_mean == 2.0 && s.norm_var == 1.0, "mean %g var %g", s.loss_mean, s.loss_var);
        double x = over ? 5.001 : 5.0;
        UpdateGuardVerdict v = update_guard_step(&s, g, x, 2.0);  // the loss at the threshold or over it
        CHECK(v.judged && v.loss_z == (x - 2.0) && v.skip_for_loss == (over == 1) && !v.skip_for_norm, "loss %g: z %g skip %d", x, v.loss_z,
              (int)v.skip_for_loss);
        UpdateGuardState t{};
        update_guard_step(&t, g, 1.0, 1.0);
        update_guard_step(&t, g, 3.0, 3.0);
        UpdateGuardVerdict w = update_guard_step(&t, g, 2.0, x);  // the norm likewise
        CHECK(w.judged && w.norm_z == (x - 2.0) && w.skip_for_norm == (over == 1) && !w.skip_for_loss, "norm %g: z %g skip %d", x, w.norm_z,
              (int)w.skip_for_norm);
        CHECK(s.skipped == over && t.skipped == over, "skipped %lld %lld", (long long)s.skipped, (long long)t.skipped);
    }
}

// ----------------------------------------------------------------------------
// parameter counts and FLOPs (host/params.h)

static ModelConfig config_of(std::vector<const char*> args) {
    args.insert(args.begin(), "train");
    RunConfig rc;
    parse_command_line(&rc, (int)args.size(), const_cast<char**>(args.data()));
    return model_config_from_flags(rc);
}

// The default shape is GPT-2 124M: llm.c counts its parameters (vocabulary padded to 50304) as
// 124475904; nanoGPT counts 123653376 without the position table and the padding (47 rows of 768).
// FLOPs per token (PaLM appendix B, nanoGPT's estimate_mfu): 6 N + 12 L H D T, N without the
// position table. A llama has no position table: N is every parameter, counted here by hand.
TEST(param_count_and_flops_per_token) {
    ModelConfig g = config_of({});
    size_t n = count_params(param_specs(g));  // 124475904, llm.c's count: test_gpt_cpu's param_counts checks it
    CHECK(params_for_flops(g, n) == 123653376 + 47 * 768, "GPT-2 124M without wpe: %zu", params_for_flops(g, n));
    double want = 6.0 * (123653376 + 47 * 768) + 12.0 * 12 * 12 * 64 * 1024;
    CHECK(training_flops_per_token(g, n, 1024) == want, "GPT-2 124M at T=1024: %.0f FLOPs, want %.0f", training_flops_per_token(g, n, 1024), want);
    // llama: L 2, H 4, Hkv 2, C 64 (D 16), F round_up(8*64/3, 64) = 192, V 1000 -> Vp 1024, untied.
    // wte and lm_head 1024*64 each; per layer ln1 64, qk 6*16*64, v 2*16*64, attproj 64*64, ln2 64,
    // fc 2*192*64, fcproj 64*192; lnf 64
    ModelConfig l = config_of({"--arch", "llama", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--dim", "64", "--vocab", "1000", "--max-seq", "256"});
    size_t per_layer = 64 + 6 * 16 * 64 + 2 * 16 * 64 + 64 * 64 + 64 + 2 * 192 * 64 + 64 * 192;
    size_t want_l = 2 * 1024 * 64 + 2 * per_layer + 64;
    size_t nl = count_params(param_specs(l));
    CHECK(nl == want_l && params_for_flops(l, nl) == want_l, "llama: %zu parameters (%zu for FLOPs), want %zu", nl, params_for_flops(l, nl), want_l);
    double want_lf = 6.0 * (double)want_l + 12.0 * 2 * 4 * 16 * 128;
    CHECK(training_flops_per_token(l, nl, 128) == want_lf, "llama at T=128: %.0f FLOPs, want %.0f", training_flops_per_token(l, nl, 128), want_lf);
}

// init_params_from_seed draws by blocks on every thread: its buffer must hold, whatever the thread
// count, each tensor's stream's normals one after another (drawn here in one loop, as the single-
// threaded init of before 2026-11-30 did). Llama's untied wte and lm_head at V = 3001, C = 48: 144048
// drawn elements across three blocks of INIT_BLOCK, then the padded rows' zeros; the norms' gains
// are constant (1, no draws).
TEST(init_from_seed_is_each_streams_normals_in_order) {
    ModelConfig c = config_of({"--arch", "llama", "--layers", "2", "--heads", "2", "--dim", "48", "--vocab", "3001", "--max-seq", "16"});
    std::vector<ParamSpec> specs = param_specs(c);
    std::vector<float> want(count_params(specs));
    float* w = want.data();
    for (size_t i = 0; i < specs.size(); i++) {
        Rng rng = rng_stream(7, 1000 + i);
        bool vocab_rows = !strcmp(specs[i].name, "wte") || !strcmp(specs[i].name, "lm_head");
        for (size_t j = 0; j < specs[i].count; j++) {
            if (vocab_rows && j >= (size_t)c.vocab_size * c.n_embd) w[j] = 0;
            else w[j] = specs[i].init_std > 0 ? (float)(specs[i].init_std * rng_normal(&rng)) : specs[i].init_value;
        }
        w += specs[i].count;
    }
    REQUIRE((size_t)c.vocab_size * c.n_embd > 2 * INIT_BLOCK, "wte has %zu elements, want more than two blocks", (size_t)c.vocab_size * c.n_embd);
    for (int threads : {1, 2, 3, 8}) {
#ifdef _OPENMP
        int before = omp_get_max_threads();
        omp_set_num_threads(threads);
#endif
        std::vector<float> got(want.size(), -1.0f);
        init_params_from_seed(specs, c, got.data(), 7);
#ifdef _OPENMP
        omp_set_num_threads(before);
#endif
        size_t first = 0;
        while (first < got.size() && memcmp(&got[first], &want[first], sizeof(float)) == 0) first++;
        CHECK(first == got.size(), "%d threads: element %zu is %.9g, want %.9g", threads, first, first < got.size() ? got[first] : 0.0, first < want.size() ? want[first] : 0.0);
    }
}

// The init from the seed: normal(0, 0.02), the two projections into the residual stream at
// 0.02 / sqrt(2 L) (GPT-2; nanoGPT's c_proj init), measured on the drawn weights; the padded
// vocabulary rows V..Vp of wte start at 0, every element of them, and the last real row does not.
TEST(init_from_seed_scales_and_zero_padding) {
    ModelConfig c = config_of({"--layers", "3", "--heads", "2", "--dim", "32", "--vocab", "200", "--max-seq", "32"});
    std::vector<ParamSpec> specs = param_specs(c);
    std::vector<float> p(count_params(specs));
    init_params_from_seed(specs, c, p.data(), 1337);
    auto tensor = [&](const char* name) {
        size_t at = 0;
        for (const ParamSpec& s : specs) {
            if (!strcmp(s.name, name)) return std::vector<float>(p.begin() + (long)at, p.begin() + (long)(at + s.count));
            at += s.count;
        }
        return std::vector<float>();
    };
    auto rms = [](const std::vector<float>& v, size_t n) {
        double s = 0;
        for (size_t i = 0; i < n; i++) s += (double)v[i] * v[i];
        return std::sqrt(s / (double)n);
    };
    std::vector<float> wte = tensor("wte"), fc = tensor("fc_w"), fcproj = tensor("fcproj_w"), attproj = tensor("attproj_w");
    REQUIRE(wte.size() == 256 * 32 && fcproj.size() == 3 * 32 * 128 && attproj.size() == 3 * 32 * 32, "sizes %zu %zu %zu", wte.size(), fcproj.size(), attproj.size());
    bool padding_zero = true, last_row_set = false;
    for (size_t i = 200 * 32; i < wte.size(); i++) padding_zero &= wte[i] == 0;
    for (size_t i = 199 * 32; i < 200 * 32; i++) last_row_set |= wte[i] != 0;
    CHECK(padding_zero && last_row_set, "padded rows zero %d, row V-1 drawn %d", (int)padding_zero, (int)last_row_set);
    double s_wte = rms(wte, 200 * 32), s_fc = rms(fc, fc.size()), s_fcproj = rms(fcproj, fcproj.size()), s_att = rms(attproj, attproj.size());
    double res = 0.02 / std::sqrt(6.0);
    CHECK(std::fabs(s_wte / 0.02 - 1) < 0.05 && std::fabs(s_fc / 0.02 - 1) < 0.05, "std of wte %g, fc_w %g (want 0.02)", s_wte, s_fc);
    CHECK(std::fabs(s_fcproj / res - 1) < 0.05 && std::fabs(s_att / res - 1) < 0.1, "std of fcproj_w %g, attproj_w %g (want %g)", s_fcproj, s_att, res);
}

TEST_MAIN()
