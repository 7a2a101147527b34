// host/dataloader.h: streams (B,T) batches of token ids out of .bin token shards.
//
// Shard format (llm.c's, so llm.c shards work unchanged; see also docs/formats.md):
//   header: 256 little-endian int32 (1024 bytes)
//     [0] magic 20240520
//     [1] version: 1 = tokens are uint16 (llm.c's format, vocabularies up to 65,536)
//                  2 = tokens are uint32 (valuepath's own, for larger vocabularies)
//     [2] N, the number of tokens in the shard
//     [3..255] 0
//   then N little-endian tokens of 2 (v1) or 4 (v2) bytes. The file size is exactly
//   1024 + N * token_bytes; anything else is a truncated file or trailing garbage.
//
// The stream. A shard of N tokens holds (N-1)/T non-overlapping sequences; sequence s covers the
// T+1 tokens [s*T, s*T+T]: inputs are the first T, targets the last T (inputs shifted by one).
// One epoch is every sequence of every shard exactly once:
//   shuffle=false: shards in sorted file-name order, sequences in order (validation).
//   shuffle=true:  the shard order is a permutation drawn per epoch, and the sequence order inside a
//                  shard is a permutation drawn per shard visit (i.e. per (epoch, shard)). Both come
//                  from our own splitmix64 seeded from (seed, epoch, shard) + Fisher-Yates, so the
//                  order is the same on every platform/compiler and can be recomputed on resume.
// Epochs follow each other forever; the trainer decides when to stop.
// Data parallel: the stream is global; process `rank` of `world` reads global sequences
// g = r, r+world, r+2*world, ... so the ranks see disjoint, interleaved parts of it. A batch is the
// next B sequences of this rank's part, crossing shard and epoch boundaries as needed.
//
// Memory: only one shard's tokens are held at a time (shards can be 100M+ tokens). Every shard's
// header and size are checked at init (cheap: stat + 1 KiB read), so a bad file fails at startup;
// token ids are checked against vocab_size when a shard is loaded (one pass over it), which for
// an unshuffled (validation) loader is at init too: every shard, once. A training shard that
// fails when it is loaded mid-run (a bad id, or a file removed or changed since startup) raises an
// ordinary runtime_error; the trainer reads each step's batches under an ErrorCapture
// (host/utils.h), so that it saves the last completed step before it stops (host/train_loop.h).
//
// Resume: DataLoaderState (below) is the position in the global stream; saved in a checkpoint and
// restored with dataloader_set_state, the resumed run reads exactly the batches an uninterrupted run
// would have read.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <glob.h>
#include <sys/stat.h>

#include "host/utils.h"

#define SHARD_MAGIC 20240520
#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * 4)
#define DATALOADER_STATE_MAGIC 0x5650444C53543031ULL  // "VPDLST01"

// ----------------------------------------------------------------------------
// the shuffling RNG: splitmix64 (Steele, Lea, Flood 2014; public domain reference by Vigna).
// Tiny, fully specified 64-bit arithmetic, so a given seed gives the same permutation everywhere
// (std::shuffle / rand() are implementation-defined and would break resume across builds).

inline uint64_t splitmix64_next(uint64_t* state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// Seed of one permutation: mixes (seed, epoch, salt) so that nearby inputs give unrelated streams.
// salt = file index for a shard's sequence order, ~0 for the epoch's shard order.
inline uint64_t dl_perm_seed(uint64_t seed, uint64_t epoch, uint64_t salt) {
    uint64_t s = seed;
    uint64_t h = splitmix64_next(&s);
    s = h ^ (epoch * 0xD1B54A32D192ED03ULL + 1);
    h = splitmix64_next(&s);
    s = h ^ (salt * 0xAEF17502108EF2D9ULL + 2);
    return splitmix64_next(&s);
}

// Uniform integer in [0, n), n >= 1, without modulo bias (rejects the top sliver of 2^64).
inline uint64_t dl_rand_below(uint64_t* state, uint64_t n) {
    uint64_t threshold = (0 - n) % n;  // = 2^64 mod n
    for (;;) {
        uint64_t r = splitmix64_next(state);
        if (r >= threshold) return r % n;
    }
}

// perm = a Fisher-Yates shuffle of 0..n-1 drawn from rng seed `seed`.
inline void dl_permutation(std::vector<uint32_t>& perm, uint64_t n, uint64_t seed) {
    perm.resize(n);
    for (uint64_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
    uint64_t state = seed;
    for (uint64_t i = n; i > 1; i--) {
        uint64_t j = dl_rand_below(&state, i);  // j in [0, i-1]
        uint32_t tmp = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = tmp;
    }
}

// ----------------------------------------------------------------------------
// the saved position

// The position in the global stream, as plain fixed-size fields so it can be written to a checkpoint
// as raw bytes (128 bytes, no padding). It is rank-independent: it is the global index of the first
// sequence of the next batch (what rank 0 reads next; rank r reads that + r), so one state saved by
// any rank restores every rank. The dataset fields let set_state refuse a state from other data.
struct DataLoaderState {
    uint64_t magic;         // DATALOADER_STATE_MAGIC: catches a state read from the wrong bytes
    uint64_t epoch;         // epochs completed so far
    uint64_t shard_cursor;  // position in this epoch's shard order (not a file index)
    uint64_t seq_cursor;    // position in that shard's sequence order (not a sequence index)
    uint64_t seq_len;       // T: the cursors count sequences of T tokens
    uint64_t shuffle;       // 1 if shuffled; the permutations depend on seed
    uint64_t seed;
    uint64_t num_shards;    // the dataset it was taken on: number of shards,
    uint64_t num_tokens;    //   total tokens,
    uint64_t shards_hash;   //   and FNV-1a of every shard's token count in sorted order
    uint64_t world;         // informational: resuming with another world is allowed
    uint64_t reserved[5];   // 0
};
static_assert(sizeof(DataLoaderState) == 128, "DataLoaderState must stay 128 bytes of plain data");

// A position in the global stream (the three cursors of DataLoaderState).
struct DataLoaderCursor {
    uint64_t epoch;
    uint64_t shard;  // index into the epoch's shard order
    uint64_t seq;    // index into the shard's sequence order
};

struct DataLoader {
    // configuration
    int B, T, vocab_size, rank, world;
    bool shuffle;
    uint64_t seed;
    // the shards, sorted by file name; validated at init
    std::vector<std::string> files;
    std::vector<uint64_t> shard_tokens;  // N of each shard
    std::vector<int> shard_token_bytes;  // 2 (v1) or 4 (v2)
    std::vector<uint64_t> shard_seqs;    // (N-1)/T of each shard
    uint64_t num_tokens;                 // across all shards
    uint64_t num_seqs;                   // sequences per epoch, across all shards
    uint64_t shards_hash;
    // where the next batch starts in the global stream (rank 0's next sequence)
    DataLoaderCursor next;
    // the shard order of epoch `order_epoch` (identity when not shuffling)
    std::vector<uint32_t> shard_order;
    uint64_t order_epoch;
    bool order_valid;
    // the shard held in memory: raw little-endian tokens of file `loaded_file`
    unsigned char* tokens = nullptr;
    size_t tokens_capacity = 0;  // bytes allocated
    int loaded_file = -1;        // -1: none
    // the sequence order of the shard visit (perm_epoch, perm_shard); empty when not shuffling
    std::vector<uint32_t> seq_order;
    uint64_t perm_epoch, perm_shard;
    bool perm_valid;
};

// ----------------------------------------------------------------------------
// shard validation

inline int32_t dl_read_le32(const unsigned char* p) {
    return (int32_t)((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
}

// If the first bytes look like text, writes a quoted excerpt to `out` (for "did you pass a text
// file?" messages); otherwise writes "".
inline void dl_text_excerpt(const unsigned char* p, size_t n, char* out, size_t out_size) {
    out[0] = '\0';
    size_t m = n < 24 ? n : 24;
    if (m == 0) return;
    for (size_t i = 0; i < m; i++) {
        unsigned char c = p[i];
        bool ok = (c >= 0x20 && c < 0x7f) || c == '\n' || c == '\r' || c == '\t' || c >= 0x80;
        if (!ok) return;
    }
    size_t k = 0;
    for (size_t i = 0; i < m && k + 3 < out_size; i++) {
        unsigned char c = p[i];
        out[k++] = (c >= 0x20 && c < 0x7f) ? (char)c : '.';
    }
    out[k] = '\0';
}

// What some other magic numbers are, so a wrong file gets a useful message.
inline const char* dl_known_magic(int32_t magic) {
    switch (magic) {
        case 20240326: return " (that is an llm.c model checkpoint, not a token shard)";
        case 20240328: return " (that is an llm.c tokenizer file, not a token shard)";
        case 20240522: return " (that is an llm.c eval file such as HellaSwag, not a token shard)";
        case 20261122: return " (that is a valuepath tokenizer file, not a token shard)";
        default: return "";
    }
}

// Checks one shard's header and size (no token data is read). Returns N and the token width.
inline void dl_validate_shard(const char* path, int T, uint64_t* n_tokens, int* token_bytes) {
    const char* remake = "re-create the shard (re-run the prepare script that wrote it, e.g. " VP_PREPARE_DATA_COMMAND ")";
    struct stat st;
    if (stat(path, &st) != 0) {
        runtime_error("check that the file exists and is readable", "cannot stat shard '%s': %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
        runtime_error("point the data glob at .bin shard files only", "shard '%s' is not a regular file (a directory?)", path);
    }
    uint64_t file_size = (uint64_t)st.st_size;
    FILE* f = fopen_check(path, "rb", "check that the file exists and is readable");
    unsigned char header[SHARD_HEADER_BYTES];
    size_t got = fread(header, 1, SHARD_HEADER_BYTES, f);
    fclose(f);
    char text[32];
    dl_text_excerpt(header, got, text, sizeof(text));
    if (got < 4 || dl_read_le32(header) != SHARD_MAGIC) {
        int32_t magic = got >= 4 ? dl_read_le32(header) : 0;
        if (text[0]) {
            runtime_error("pass the tokenized .bin shards, not the raw text; tokenize it first, e.g. " VP_PREPARE_DATA_COMMAND,
                          "'%s' is not a token shard: it looks like a text file (it starts with \"%s\"); expected the magic number %d",
                          path, text, SHARD_MAGIC);
        }
        if (got < 4) {
            runtime_error(remake, "'%s' is not a token shard: it is %llu bytes, shorter than the %d-byte header",
                          path, (unsigned long long)file_size, SHARD_HEADER_BYTES);
        }
        runtime_error(remake, "'%s' is not a token shard: wrong magic number %d (0x%08x)%s; expected %d",
                      path, magic, (unsigned)magic, dl_known_magic(magic), SHARD_MAGIC);
    }
    if (got < SHARD_HEADER_BYTES) {
        runtime_error(remake, "shard '%s' is truncated: it is %llu bytes, shorter than the %d-byte header",
                      path, (unsigned long long)file_size, SHARD_HEADER_BYTES);
    }
    int32_t version = dl_read_le32(header + 4);
    if (version != 1 && version != 2) {
        runtime_error("version 1 (uint16 tokens, llm.c) and 2 (uint32 tokens) are supported; re-create the shard or update valuepath",
                      "shard '%s' has unknown version %d", path, version);
    }
    int32_t n = dl_read_le32(header + 8);
    if (n < 0) {  // a count of 2^31 or more, as a writer that stores it unsigned would put it
        runtime_error("write shards of at most 2^31-1 tokens (the prepare scripts cut the data into several with --shard-size)",
                      "shard '%s' has a token count of %u in its header (%d as the int32 the format stores): more than the format's limit of 2^31-1 tokens",
                      path, (unsigned)n, n);
    }
    int tb = version == 1 ? 2 : 4;
    uint64_t expected = (uint64_t)SHARD_HEADER_BYTES + (uint64_t)n * (uint64_t)tb;
    if (file_size != expected) {
        runtime_error(remake,
                      "shard '%s' is %llu bytes but its header says %d tokens of %d bytes, i.e. %llu bytes (1024-byte header + tokens): %s",
                      path, (unsigned long long)file_size, n, tb, (unsigned long long)expected,
                      file_size < expected ? "the file is truncated" : "the file has trailing garbage");
    }
    // the rest of the header is reserved and written as zeros (ours and llm.c's writers): anything
    // else there means the file is damaged or not what it claims to be
    for (int k = 3; k < SHARD_HEADER_BYTES / 4; k++)
        if (dl_read_le32(header + 4 * k) != 0)
            runtime_error(remake, "shard '%s' is corrupt: reserved header int %d is %d, not 0", path, k, dl_read_le32(header + 4 * k));
    if ((uint64_t)n < (uint64_t)T + 1) {
        runtime_error("use a smaller --seq-len, or put more text in the shard",
                      "shard '%s' has %d tokens, fewer than seq_len+1 = %d needed for one sequence of T=%d",
                      path, n, T + 1, T);
    }
    *n_tokens = (uint64_t)n;
    *token_bytes = tb;
}

// ----------------------------------------------------------------------------
// the stream

// The shard order of `epoch` (lazily computed; identity when not shuffling).
inline void dl_ensure_shard_order(DataLoader* dl, uint64_t epoch) {
    if (dl->order_valid && dl->order_epoch == epoch) return;
    uint64_t n = dl->files.size();
    if (dl->shuffle) {
        dl_permutation(dl->shard_order, n, dl_perm_seed(dl->seed, epoch, ~(uint64_t)0));
    } else {
        dl->shard_order.resize(n);
        for (uint64_t i = 0; i < n; i++) dl->shard_order[i] = (uint32_t)i;
    }
    dl->order_epoch = epoch;
    dl->order_valid = true;
}

inline int dl_file_at(DataLoader* dl, uint64_t epoch, uint64_t shard) {
    dl_ensure_shard_order(dl, epoch);
    return (int)dl->shard_order[shard];
}

// Moves cursor c forward by `count` sequences, crossing shards and epochs. Costs O(shards crossed).
inline void dl_advance(DataLoader* dl, DataLoaderCursor* c, uint64_t count) {
    // whole epochs at once, so a huge world on a tiny dataset does not loop per shard
    uint64_t nshards = dl->files.size();
    while (count > 0) {
        if (c->shard == 0 && c->seq == 0 && count >= dl->num_seqs) {
            c->epoch += count / dl->num_seqs;
            count %= dl->num_seqs;
            continue;
        }
        uint64_t left = dl->shard_seqs[dl_file_at(dl, c->epoch, c->shard)] - c->seq;
        if (count < left) {
            c->seq += count;
            count = 0;
        } else {
            count -= left;
            c->seq = 0;
            c->shard++;
            if (c->shard == nshards) {
                c->shard = 0;
                c->epoch++;
            }
        }
    }
}

// Reads shard file `fi` into dl->tokens and checks every token id against vocab_size.
inline void dl_load_shard(DataLoader* dl, int fi) {
    if (dl->loaded_file == fi) return;
    const char* path = dl->files[fi].c_str();
    uint64_t n = dl->shard_tokens[fi];
    int tb = dl->shard_token_bytes[fi];
    size_t bytes = (size_t)(n * (uint64_t)tb);
    if (bytes > dl->tokens_capacity) {
        free(dl->tokens);
        dl->tokens_capacity = 0;
        dl->tokens = (unsigned char*)malloc(bytes);  // on failure nullptr, not the freed buffer (dataloader_free frees it)
        // the whole shard is held (and, in a data-parallel job, by every rank): a shard of 2^31-1
        // uint32 tokens is 8 GiB per rank, so the way out is smaller shards, not a smaller batch
        if (!dl->tokens)
            runtime_error("every rank holds one whole shard in memory: write smaller shards (the prepare scripts' --shard-size) or use a machine with more memory",
                          "out of memory allocating %s for shard '%s' (%llu tokens of %d bytes)", human_bytes(bytes).c_str(), path,
                          (unsigned long long)n, tb);
        dl->tokens_capacity = bytes;
    }
    dl->loaded_file = -1;  // until fully read and validated
    FILE* f = fopen_check(path, "rb", "the shard was readable at startup; check that it was not moved or deleted");
    // the header again: the file may have been replaced since init
    unsigned char header[SHARD_HEADER_BYTES];
    fread_check(header, 1, SHARD_HEADER_BYTES, f, path);
    int32_t version = dl_read_le32(header + 4);
    if (dl_read_le32(header) != SHARD_MAGIC || (version == 1 ? 2 : 4) != tb || (uint64_t)dl_read_le32(header + 8) != n) {
        runtime_error("do not modify the shards while training; restart the run",
                      "shard '%s' changed since startup (its header no longer matches)", path);
    }
    fread_check(dl->tokens, 1, bytes, f, path);
    fclose(f);
    // one pass over the ids: a token >= vocab_size would index outside the embedding table
    uint64_t vocab = (uint64_t)dl->vocab_size;
    for (uint64_t i = 0; i < n; i++) {
        const unsigned char* p = dl->tokens + i * tb;
        uint64_t id = tb == 2 ? ((uint64_t)p[0] | ((uint64_t)p[1] << 8)) : (uint64_t)(uint32_t)dl_read_le32(p);
        if (id >= vocab) {
            runtime_error("the shard was made with a larger vocabulary than the model's; set --vocab to the tokenizer's vocabulary, or re-tokenize with the right tokenizer",
                          "shard '%s': token id %llu at position %llu is out of range for vocab size %d",
                          path, (unsigned long long)id, (unsigned long long)i, dl->vocab_size);
        }
    }
    dl->loaded_file = fi;
}

// Token i of the loaded shard.
inline int dl_token(const DataLoader* dl, uint64_t i) {
    int tb = dl->shard_token_bytes[dl->loaded_file];
    const unsigned char* p = dl->tokens + i * tb;
    if (tb == 2) return (int)((uint32_t)p[0] | ((uint32_t)p[1] << 8));
    return (int)dl_read_le32(p);
}

// Copies the sequence at stream position c into inputs[0..T) and targets[0..T).
inline void dl_read_sequence(DataLoader* dl, const DataLoaderCursor* c, int* inputs, int* targets) {
    int fi = dl_file_at(dl, c->epoch, c->shard);
    dl_load_shard(dl, fi);
    uint64_t s = c->seq;
    if (dl->shuffle) {
        if (!dl->perm_valid || dl->perm_epoch != c->epoch || dl->perm_shard != c->shard) {
            dl_permutation(dl->seq_order, dl->shard_seqs[fi], dl_perm_seed(dl->seed, c->epoch, (uint64_t)fi));
            dl->perm_epoch = c->epoch;
            dl->perm_shard = c->shard;
            dl->perm_valid = true;
        }
        s = dl->seq_order[s];
    }
    uint64_t start = s * (uint64_t)dl->T;
    int T = dl->T;
    for (int t = 0; t < T; t++) {
        inputs[t] = dl_token(dl, start + t);
        targets[t] = dl_token(dl, start + t + 1);
    }
}

// ----------------------------------------------------------------------------
// public API

// glob: shell glob of the shards (glob(3)), sorted by name. B sequences of T tokens per batch.
// Every token must be < vocab_size (pass the tokenizer's real vocabulary, not a padded one, to
// catch wrong-tokenizer shards). This process is `rank` of `world` (world=1: single process).
inline void dataloader_init(DataLoader* dl, const char* pattern, int B, int T, int vocab_size, bool shuffle,
                            uint64_t seed, int rank, int world) {
    if (B <= 0 || T <= 0) usage_error(nullptr, "batch size B=%d and sequence length T=%d must be positive", B, T);
    if (vocab_size <= 0) usage_error(nullptr, "vocab size must be positive, got %d", vocab_size);
    if (world <= 0 || rank < 0 || rank >= world) usage_error(nullptr, "rank %d of world %d is invalid (need 0 <= rank < world)", rank, world);
    dl->B = B;
    dl->T = T;
    dl->vocab_size = vocab_size;
    dl->shuffle = shuffle;
    dl->seed = seed;
    dl->rank = rank;
    dl->world = world;
    dl->files.clear();
    dl->shard_tokens.clear();
    dl->shard_token_bytes.clear();
    dl->shard_seqs.clear();
    dl->shard_order.clear();
    dl->seq_order.clear();
    dl->order_valid = false;
    dl->perm_valid = false;
    dl->order_epoch = dl->perm_epoch = dl->perm_shard = 0;
    free(dl->tokens);  // nullptr unless this loader was initialized before
    dl->tokens = nullptr;
    dl->tokens_capacity = 0;
    dl->loaded_file = -1;

    glob_t g;
    memset(&g, 0, sizeof(g));
    int rc = glob(pattern, 0, nullptr, &g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
        globfree(&g);
        runtime_error("create the shards first, e.g. " VP_PREPARE_DATA_COMMAND ", and check the path",
                      "no token shards match '%s'", pattern);
    }
    if (rc != 0) {
        globfree(&g);
        runtime_error("check the path and its permissions", "glob '%s' failed (glob error %d)", pattern, rc);
    }
    for (size_t i = 0; i < g.gl_pathc; i++) dl->files.push_back(g.gl_pathv[i]);
    globfree(&g);
    // our own byte order, not the locale's collation, so every machine agrees on the order
    std::sort(dl->files.begin(), dl->files.end(), [](const std::string& a, const std::string& b) { return strcmp(a.c_str(), b.c_str()) < 0; });
    // a file index is an int (loaded_file, dl_file_at) and the shard order a uint32 permutation
    if (dl->files.size() > (size_t)INT32_MAX) runtime_error("write fewer, larger shards", "%zu shards match '%s', more than %d", dl->files.size(), pattern, INT32_MAX);

    dl->num_tokens = 0;
    dl->num_seqs = 0;
    dl->shards_hash = 0xCBF29CE484222325ULL;  // FNV-1a offset basis
    for (size_t i = 0; i < dl->files.size(); i++) {
        uint64_t n;
        int tb;
        dl_validate_shard(dl->files[i].c_str(), T, &n, &tb);
        dl->shard_tokens.push_back(n);
        dl->shard_token_bytes.push_back(tb);
        dl->shard_seqs.push_back((n - 1) / (uint64_t)T);
        dl->num_tokens += n;
        dl->num_seqs += (n - 1) / (uint64_t)T;
        for (int k = 0; k < 8; k++) {
            dl->shards_hash ^= (n >> (8 * k)) & 0xFF;
            dl->shards_hash *= 0x100000001B3ULL;  // FNV prime
        }
    }
    if (dl->num_seqs == 0) {  // unreachable with the per-shard check above, kept as a guard
        runtime_error("use a smaller --seq-len or more data", "the shards matching '%s' hold no full sequence of T+1=%d tokens", pattern, T + 1);
    }
    // Validation sets (not shuffled) are small and read by every evaluation anyway: check their
    // token ids now, so that a bad one stops the run at startup, not at the final evaluation after
    // hours of training. Training shards stay checked as they are loaded (they can be many GB).
    if (!shuffle)
        for (size_t i = 0; i < dl->files.size(); i++) dl_load_shard(dl, (int)i);
    dl->next.epoch = dl->next.shard = dl->next.seq = 0;
}

// inputs (B,T), targets (B,T): the next B sequences of this rank; targets = inputs shifted by one.
inline void dataloader_next_batch(DataLoader* dl, int* inputs, int* targets) {
    for (int b = 0; b < dl->B; b++) {
        DataLoaderCursor c = dl->next;
        dl_advance(dl, &c, (uint64_t)dl->rank);
        dl_read_sequence(dl, &c, inputs + (size_t)b * dl->T, targets + (size_t)b * dl->T);
        dl_advance(dl, &dl->next, (uint64_t)dl->world);
    }
}

// Back to the very start of epoch 0 (before each validation pass). The loaded shard is kept.
inline void dataloader_reset(DataLoader* dl) {
    dl->next.epoch = dl->next.shard = dl->next.seq = 0;
}

// The first of b's shards that is also one of a's (the same file by device and inode, whatever the
// path or link it is named by), or "" if none: a val set that shares a shard with the train data
// measures the loss on data the model trains on.
inline std::string dataloader_shared_shard(const DataLoader* a, const DataLoader* b) {
    std::vector<std::pair<dev_t, ino_t>> ids;
    for (const std::string& f : a->files) {
        struct stat st;
        if (stat(f.c_str(), &st) == 0) ids.push_back({st.st_dev, st.st_ino});
    }
    std::sort(ids.begin(), ids.end());
    for (const std::string& f : b->files) {
        struct stat st;
        if (stat(f.c_str(), &st) == 0 && std::binary_search(ids.begin(), ids.end(), std::make_pair(st.st_dev, st.st_ino))) return f;
    }
    return "";
}

inline void dataloader_free(DataLoader* dl) {
    free(dl->tokens);
    dl->tokens = nullptr;
    dl->tokens_capacity = 0;
    dl->loaded_file = -1;
    std::vector<std::string>().swap(dl->files);
    std::vector<uint64_t>().swap(dl->shard_tokens);
    std::vector<int>().swap(dl->shard_token_bytes);
    std::vector<uint64_t>().swap(dl->shard_seqs);
    std::vector<uint32_t>().swap(dl->shard_order);
    std::vector<uint32_t>().swap(dl->seq_order);
    dl->order_valid = dl->perm_valid = false;
}

inline DataLoaderState dataloader_get_state(const DataLoader* dl) {
    DataLoaderState s;
    memset(&s, 0, sizeof(s));
    s.magic = DATALOADER_STATE_MAGIC;
    s.epoch = dl->next.epoch;
    s.shard_cursor = dl->next.shard;
    s.seq_cursor = dl->next.seq;
    s.seq_len = (uint64_t)dl->T;
    s.shuffle = dl->shuffle ? 1 : 0;
    s.seed = dl->seed;
    s.num_shards = dl->files.size();
    s.num_tokens = dl->num_tokens;
    s.shards_hash = dl->shards_hash;
    s.world = (uint64_t)dl->world;
    return s;
}

// Restores a position saved by dataloader_get_state (any rank's, any world). Refuses a state taken
// on other data, another T, or another shuffle/seed: the resumed stream would not be the same.
inline void dataloader_set_state(DataLoader* dl, const DataLoaderState* s) {
    const char* fresh = "resume with the same --train-data files, --seq-len and --seed as the checkpointed run, or start a fresh run";
    const char* where = dl->files.empty() ? "" : dl->files[0].c_str();
    if (s->magic != DATALOADER_STATE_MAGIC) {
        runtime_error("the checkpoint is corrupt or from another program; start a fresh run",
                      "data loader state has bad magic 0x%016llx (expected 0x%016llx)",
                      (unsigned long long)s->magic, (unsigned long long)DATALOADER_STATE_MAGIC);
    }
    if (s->seq_len != (uint64_t)dl->T) {
        runtime_error(fresh, "data loader state was saved with seq_len %llu, but this run uses %d",
                      (unsigned long long)s->seq_len, dl->T);
    }
    if (s->num_shards != dl->files.size() || s->num_tokens != dl->num_tokens || s->shards_hash != dl->shards_hash) {
        runtime_error(fresh,
                      "data loader state was saved on %llu shards / %llu tokens, but the current data (%zu shards from '%s'...) has %llu tokens or different shard sizes",
                      (unsigned long long)s->num_shards, (unsigned long long)s->num_tokens, dl->files.size(), where,
                      (unsigned long long)dl->num_tokens);
    }
    if (s->shuffle != (dl->shuffle ? 1u : 0u) || (dl->shuffle && s->seed != dl->seed)) {
        runtime_error(fresh, "data loader state was saved with shuffle=%llu seed=%llu, but this run has shuffle=%d seed=%llu",
                      (unsigned long long)s->shuffle, (unsigned long long)s->seed, dl->shuffle ? 1 : 0,
                      (unsigned long long)dl->seed);
    }
    if (s->shard_cursor >= dl->files.size()) {
        runtime_error(fresh, "data loader state points at shard %llu, but there are %zu shards",
                      (unsigned long long)s->shard_cursor, dl->files.size());
    }
    int fi = dl_file_at(dl, s->epoch, s->shard_cursor);
    if (s->seq_cursor >= dl->shard_seqs[fi]) {
        runtime_error(fresh, "data loader state points at sequence %llu of shard '%s', which has %llu sequences",
                      (unsigned long long)s->seq_cursor, dl->files[fi].c_str(), (unsigned long long)dl->shard_seqs[fi]);
    }
    dl->next.epoch = s->epoch;
    dl->next.shard = s->shard_cursor;
    dl->next.seq = s->seq_cursor;
}

inline size_t dataloader_num_tokens(const DataLoader* dl) { return (size_t)dl->num_tokens; }

// Every id of a batch (inputs and, if given, targets: n each) must be a real token, < V. The data
// loader checks shards as it loads them; this guards batches that come from anywhere else
// (sampling, tests) before they index an embedding table.
inline void check_token_ids(const int* inputs, const int* targets, int n, int V) {
    for (int i = 0; i < n; i++) {
        for (int id : {inputs[i], targets ? targets[i] : 0})
            if (id < 0 || id >= V)
                runtime_error("the data does not match --vocab; re-tokenize or fix --vocab", "token id %d at position %d is outside the vocabulary [0, %d)", id, i, V);
    }
}
