// host/tokenizer.h: decodes token ids to bytes, for printing samples, and encodes a --sample-prompt
// (training itself only reads pre-tokenized shards, see host/dataloader.h).
//
// Three file formats are read; the format is detected from the content, never the file name:
//
// 1. GPT-2's encoder.json: a flat JSON object {"token string": id, ...} (50257 entries). The token
//    strings are in GPT-2's byte-level alphabet: every byte 0..255 is drawn as one unicode character
//    (bytes_to_unicode() of openai/gpt-2's encoder.py: printable latin-1 bytes map to themselves,
//    the other 68 to U+0100..U+0143), written raw as UTF-8 or as \uXXXX escapes. We map each
//    character back to its byte. The end-of-text id is the id of "<|endoftext|>" (50256).
//    Only this flat object-of-string-to-int shape is accepted; anything else is refused. GPT-2's
//    merges file vocab.bpe, when it lies beside encoder.json (as in openai/gpt-2's model folders
//    and valuepath's cache), makes the tokenizer encode too.
//
// 2. valuepath's compact "vptok" file, so any tokenizer (NeoX, Llama-2, ...) can be used without
//    a parser for its own format (a Python exporter writes it; see docs/formats.md):
//      header: 256 little-endian int32 (1024 bytes)
//        [0] magic 20261122
//        [1] version 1 (decode only) or 2
//        [2] vocab size N (>= 1)
//        [3] end-of-text id, or -1 if there is none
//        [4] encoder kind (version 2): 0 none, 1 byte-level BPE, 2 SentencePiece BPE
//        [5] kind 1: number of merges M     [6] kind 1: number of added tokens A
//        [7] flags: kind 1, bit 0: NFC-normalize the text first; kind 2, bit 0: add a dummy-prefix space
//        [8] kind 2: unk id or -1
//        [9..255] 0
//      then for each id 0..N-1: a little-endian uint32 byte length L, then L raw bytes;
//      then (kind 1) M int32 triples (left id, right id, merged id) in merge order and A int32 ids
//      of the added tokens that match whole in text, or (kind 2) N (float32 score, int32 type).
//      The file ends right there (trailing bytes are an error).
//
// 3. llm.c's tokenizer file (gpt2_tokenizer.bin): header 256 little-endian uint32 with [0] magic
//    20240328, [1] version 1 or 2, [2] vocab size, [3] end-of-text id (version 2; version 1 means
//    50256); then for each id a uint8 length L >= 1 and L bytes.
//
// A decoded token is raw bytes: it may be a partial UTF-8 sequence (GPT-2 splits multi-byte
// characters across tokens), so print the bytes as-is and let the terminal join them.
//
// Encoding (tokenizer_encode) reproduces the Python side's tokenizers (scripts/vp_data/tokenizer.py,
// which the shards were made with); tests/python/test_prompt_encode.py diffs the two on real text:
//   byte-level BPE (GPT-2 as tiktoken, GPT-NeoX-20B as HF tokenizers): the added tokens that match
//     whole in text are split off first (leftmost, longest), the rest is cut by GPT-2's
//     pre-tokenizer regex, and each piece's bytes are merged pair by pair, always the pair of
//     lowest merge rank, leftmost first. NeoX first normalizes the text to NFC (host/unicode.h).
//   SentencePiece BPE (Llama-2, as the sentencepiece library): spaces become U+2581 (here: the
//     pieces keep spaces, so a literal U+2581 becomes a space instead), a dummy space is prefixed,
//     the text is cut into characters, and the adjacent pair whose join is a piece of highest
//     score is merged, leftmost first, until none is; a character that is no piece becomes its
//     UTF-8 bytes' <0xNN> pieces (byte fallback) or unk.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "host/unicode.h"
#include "host/utils.h"

#define VPTOK_MAGIC 20261122
#define VPTOK_VERSION 2
#define VPTOK_HEADER_BYTES 1024
#define LLMC_TOKENIZER_MAGIC 20240328

enum TokenizerEncoderKind { ENCODER_NONE = 0, ENCODER_BYTE_BPE = 1, ENCODER_SENTENCEPIECE = 2 };
// SentencePiece's piece types (sentencepiece_model.proto)
enum { SP_NORMAL = 1, SP_UNKNOWN = 2, SP_CONTROL = 3, SP_USER_DEFINED = 4, SP_UNUSED = 5, SP_BYTE = 6 };

struct Tokenizer {
    int vocab_size = 0;
    int eot_id = -1;            // -1 if unknown
    std::vector<char> bytes;    // every token's bytes, each followed by a NUL
    std::vector<size_t> offset; // (vocab_size) start of token i in bytes
    std::vector<size_t> length; // (vocab_size) byte length of token i, without the NUL

    // encoding: empty unless encoder_kind != ENCODER_NONE
    int encoder_kind = ENCODER_NONE;
    std::string encoder_missing;  // why there is no encoder, for the error --sample-prompt gives
    int byte_token[256];          // kind 1: the token of each single byte; kind 2: its <0xNN> piece or -1
    // kind 1: (left id << 32 | right id) -> (merge rank, merged id)
    std::unordered_map<uint64_t, std::pair<int, int>> merges;
    std::vector<int> added;       // kind 1: ids matched whole in text before BPE (NeoX's space runs)
    bool normalize_nfc = false;   // kind 1: the text is NFC-normalized first (NeoX's normalizer)
    // kind 2
    std::unordered_map<std::string, int> pieces;  // normal pieces' bytes -> id
    std::vector<float> score;                     // (vocab_size) merge priority: higher first
    int unk_id = -1;
    bool add_dummy_prefix = false;
};

// ----------------------------------------------------------------------------
// building the table

inline void tok_reset(Tokenizer* tok) {
    tok->vocab_size = 0;
    tok->eot_id = -1;
    tok->bytes.clear();
    tok->offset.clear();
    tok->length.clear();
    tok->encoder_kind = ENCODER_NONE;
    tok->encoder_missing = "it holds no merges";
    for (int b = 0; b < 256; b++) tok->byte_token[b] = -1;
    tok->merges.clear();
    tok->added.clear();
    tok->pieces.clear();
    tok->score.clear();
    tok->unk_id = -1;
    tok->add_dummy_prefix = false;
    tok->normalize_nfc = false;
}

inline std::string tok_bytes(const Tokenizer* tok, int id) {
    return std::string(tok->bytes.data() + tok->offset[id], tok->length[id]);
}

inline void tok_append(Tokenizer* tok, const unsigned char* p, size_t n) {
    tok->offset.push_back(tok->bytes.size());
    tok->length.push_back(n);
    tok->bytes.insert(tok->bytes.end(), (const char*)p, (const char*)p + n);
    tok->bytes.push_back('\0');
}

inline uint32_t tok_le32(const unsigned char* p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

// Reads a whole (small: a few MB) file into memory.
inline void tok_read_file(const char* path, std::vector<unsigned char>& data) {
    require_regular_file(path, "tokenizer file", "check the --tokenizer path; for GPT-2 it is encoder.json", 1ull << 30);
    FILE* f = fopen_check(path, "rb", "check the --tokenizer path; for GPT-2 it is encoder.json");
    if (fseek(f, 0, SEEK_END) != 0) runtime_error("pass a regular file", "cannot seek in tokenizer file '%s'", path);
    long size = ftell(f);
    if (size < 0) runtime_error("pass a regular file (not a directory or pipe)", "cannot get the size of tokenizer file '%s'", path);
    fseek(f, 0, SEEK_SET);
    data.resize((size_t)size);
    if (size > 0) fread_check(data.data(), 1, (size_t)size, f, path);
    fclose(f);
}

// ----------------------------------------------------------------------------
// format 2 and 3: the binary files

// Merge rank `rank`: left + right -> merged. Each must be a token and merged's bytes the join.
inline void tok_add_merge(Tokenizer* tok, int rank, long left, long right, long merged, const char* path, const char* hint) {
    long n = tok->vocab_size;
    if (left < 0 || left >= n || right < 0 || right >= n || merged < 0 || merged >= n) {
        runtime_error(hint, "tokenizer file '%s': merge %d (%ld, %ld -> %ld) names an id outside 0..%ld", path, rank, left, right, merged, n - 1);
    }
    if (tok_bytes(tok, (int)merged) != tok_bytes(tok, (int)left) + tok_bytes(tok, (int)right)) {
        runtime_error(hint, "tokenizer file '%s': merge %d joins tokens %ld and %ld, but token %ld is not their bytes joined", path, rank, left, right, merged);
    }
    uint64_t key = ((uint64_t)left << 32) | (uint64_t)right;
    if (!tok->merges.emplace(key, std::make_pair(rank, (int)merged)).second) {
        runtime_error(hint, "tokenizer file '%s': merge %d repeats the pair (%ld, %ld)", path, rank, left, right);
    }
}

// kind 1: BPE starts from single bytes; each byte's token is the first one-byte token that is not
// an added token (NeoX's added tokens are multi-byte, so this only matters for odd files). The
// bytes that valid UTF-8 never holds (0xC0, 0xC1, 0xF5..0xFF) may lack one: NeoX has none for them.
inline void tok_find_byte_tokens(Tokenizer* tok, const char* path, const char* hint) {
    std::vector<char> is_added(tok->vocab_size, 0);
    for (int id : tok->added) is_added[id] = 1;
    for (int id = 0; id < tok->vocab_size; id++) {
        if (tok->length[id] == 1 && !is_added[id]) {
            unsigned char b = (unsigned char)tok->bytes[tok->offset[id]];
            if (tok->byte_token[b] < 0) tok->byte_token[b] = id;
        }
    }
    for (int b = 0; b < 256; b++) {
        bool in_utf8 = b != 0xC0 && b != 0xC1 && b < 0xF5;
        if (in_utf8 && tok->byte_token[b] < 0) runtime_error(hint, "tokenizer file '%s' has no token for the byte 0x%02X, which byte-level BPE starts from", path, b);
    }
}

inline void tok_load_vptok(Tokenizer* tok, const char* path, const std::vector<unsigned char>& d) {
    const char* remake = "the tokenizer file is corrupt; re-export it (python -m vp_data.tokenizer export, docs/data.md)";
    size_t size = d.size();
    if (size < VPTOK_HEADER_BYTES) {
        runtime_error(remake, "tokenizer file '%s' is truncated: %zu bytes, shorter than the %d-byte vptok header", path, size, VPTOK_HEADER_BYTES);
    }
    int32_t header[VPTOK_HEADER_BYTES / 4];
    for (int k = 0; k < VPTOK_HEADER_BYTES / 4; k++) header[k] = (int32_t)tok_le32(&d[4 * k]);
    int32_t version = header[1], n = header[2], eot = header[3];
    if (version != 1 && version != VPTOK_VERSION) {
        runtime_error("re-export the tokenizer, or update valuepath", "tokenizer file '%s' has vptok version %d; versions 1 and %d are supported", path, version, VPTOK_VERSION);
    }
    if (n <= 0) runtime_error(remake, "tokenizer file '%s' has vocab size %d; it must be at least 1", path, n);
    if (eot < -1 || eot >= n) runtime_error(remake, "tokenizer file '%s' has end-of-text id %d, outside -1..%d", path, eot, n - 1);
    int32_t kind = version >= 2 ? header[4] : ENCODER_NONE;
    if (kind != ENCODER_NONE && kind != ENCODER_BYTE_BPE && kind != ENCODER_SENTENCEPIECE) {
        runtime_error(remake, "tokenizer file '%s' has encoder kind %d; 0, 1 and 2 are known", path, kind);
    }
    int32_t n_merges = kind == ENCODER_BYTE_BPE ? header[5] : 0, n_added = kind == ENCODER_BYTE_BPE ? header[6] : 0;
    if (n_merges < 0 || n_added < 0 || n_added > n) {
        runtime_error(remake, "tokenizer file '%s' has %d merges and %d added tokens; impossible counts", path, n_merges, n_added);
    }
    // every token needs at least its 4-byte length: reject an absurd N before allocating for it
    if ((uint64_t)n * 4 > size - VPTOK_HEADER_BYTES) {
        runtime_error(remake, "tokenizer file '%s' is truncated: %zu bytes cannot hold %d tokens", path, size, n);
    }
    tok_reset(tok);
    tok->offset.reserve(n);
    tok->length.reserve(n);
    size_t pos = VPTOK_HEADER_BYTES;
    for (int32_t i = 0; i < n; i++) {
        if (size - pos < 4) {
            runtime_error(remake, "tokenizer file '%s' is truncated: it ends in the length of token %d of %d (%zu bytes)", path, i, n, size);
        }
        uint64_t len = tok_le32(&d[pos]);
        pos += 4;
        if (len > size - pos) {
            runtime_error(remake, "tokenizer file '%s' is truncated: token %d of %d has %llu bytes but only %zu remain",
                          path, i, n, (unsigned long long)len, size - pos);
        }
        tok_append(tok, &d[pos], (size_t)len);
        pos += (size_t)len;
    }
    tok->vocab_size = n;
    tok->eot_id = eot;
    // the encoder section's size is known from the header: check it before reading it
    uint64_t section = kind == ENCODER_BYTE_BPE ? 12ull * (uint64_t)n_merges + 4ull * (uint64_t)n_added
                       : kind == ENCODER_SENTENCEPIECE ? 8ull * (uint64_t)n : 0;
    if (size - pos < section) {
        runtime_error(remake, "tokenizer file '%s' is truncated: its encoder section (kind %d) needs %llu bytes after the %d tokens, but %zu remain",
                      path, kind, (unsigned long long)section, n, size - pos);
    }
    if (size - pos > section) {
        runtime_error(remake, "tokenizer file '%s' has %llu bytes of trailing garbage after its %d tokens%s (file is %zu bytes)", path,
                      (unsigned long long)(size - pos - section), n, kind == ENCODER_NONE ? "" : " and encoder section", size);
    }
    if (kind != ENCODER_NONE && (header[7] & ~1) != 0) {
        runtime_error(remake, "tokenizer file '%s' has encoder flags 0x%X; only bit 0 is known", path, (unsigned)header[7]);
    }
    int user_defined = 0;  // kind 2's pieces of that type
    if (kind == ENCODER_BYTE_BPE) {
        tok->normalize_nfc = (header[7] & 1) != 0;
        tok->merges.reserve((size_t)n_merges);
        for (int32_t r = 0; r < n_merges; r++, pos += 12) {
            tok_add_merge(tok, r, (int32_t)tok_le32(&d[pos]), (int32_t)tok_le32(&d[pos + 4]), (int32_t)tok_le32(&d[pos + 8]), path, remake);
        }
        for (int32_t a = 0; a < n_added; a++, pos += 4) {
            int32_t id = (int32_t)tok_le32(&d[pos]);
            if (id < 0 || id >= n || tok->length[id] == 0) {
                runtime_error(remake, "tokenizer file '%s': added token %d is id %d, not a non-empty token of 0..%d", path, a, id, n - 1);
            }
            tok->added.push_back(id);
        }
        tok_find_byte_tokens(tok, path, remake);
    } else if (kind == ENCODER_SENTENCEPIECE) {
        int32_t unk = header[8];
        if (unk < -1 || unk >= n) runtime_error(remake, "tokenizer file '%s' has unk id %d, outside -1..%d", path, unk, n - 1);
        tok->unk_id = unk;
        tok->add_dummy_prefix = (header[7] & 1) != 0;
        tok->score.resize(n);
        for (int32_t id = 0; id < n; id++, pos += 8) {
            uint32_t bits = tok_le32(&d[pos]);
            memcpy(&tok->score[id], &bits, 4);
            int32_t type = (int32_t)tok_le32(&d[pos + 4]);
            if (type < SP_NORMAL || type > SP_BYTE) runtime_error(remake, "tokenizer file '%s': piece %d has type %d, outside 1..6", path, id, type);
            if (type == SP_USER_DEFINED) user_defined++;
            if (type == SP_NORMAL || type == SP_USER_DEFINED) {
                if (tok->length[id] == 0) runtime_error(remake, "tokenizer file '%s': piece %d is empty", path, id);
                if (!tok->pieces.emplace(tok_bytes(tok, id), id).second) {
                    runtime_error(remake, "tokenizer file '%s': pieces %d and %d have the same bytes", path, tok->pieces[tok_bytes(tok, id)], id);
                }
            } else if (type == SP_BYTE) {
                if (tok->length[id] != 1) runtime_error(remake, "tokenizer file '%s': byte piece %d is %zu bytes long, not 1", path, id, tok->length[id]);
                unsigned char b = (unsigned char)tok->bytes[tok->offset[id]];
                if (tok->byte_token[b] >= 0) runtime_error(remake, "tokenizer file '%s': pieces %d and %d both stand for the byte 0x%02X", path, tok->byte_token[b], id, b);
                tok->byte_token[b] = id;
            }
        }
    }
    tok->encoder_kind = kind;
    if (kind == ENCODER_SENTENCEPIECE && user_defined > 0) {
        // SentencePiece matches user-defined pieces whole before it merges; this encoder does not
        tok->encoder_kind = ENCODER_NONE;
        tok->encoder_missing = "it has user-defined pieces, which this encoder does not match (the exporter never writes them)";
    }
    if (version == 1) tok->encoder_missing = "it is a version 1 vptok file, which holds no merges (re-export it: python -m vp_data.tokenizer export, or rerun the prepare script)";
    else if (kind == ENCODER_NONE) tok->encoder_missing = "its exporter found no encoder this build reproduces (the exporter said why when it wrote the file)";
}

inline void tok_load_llmc(Tokenizer* tok, const char* path, const std::vector<unsigned char>& d) {
    const char* remake = "the tokenizer file is corrupt; re-create it (llm.c: python train_gpt2.py writes gpt2_tokenizer.bin)";
    size_t size = d.size();
    if (size < 1024) runtime_error(remake, "llm.c tokenizer file '%s' is truncated: %zu bytes, shorter than the 1024-byte header", path, size);
    uint32_t version = tok_le32(&d[4]);
    uint32_t n = tok_le32(&d[8]);
    if (version != 1 && version != 2) runtime_error(remake, "llm.c tokenizer file '%s' has unknown version %u", path, version);
    if (n == 0 || n > (uint32_t)(size - 1024) / 2) runtime_error(remake, "llm.c tokenizer file '%s' has an impossible vocab size %u for its size %zu", path, n, size);
    // version 2 stores the end-of-text id, which must be a token of the file (as a vptok's);
    // version 1 has none and GPT-2's 50256 is assumed, or none for a smaller vocabulary
    int32_t eot = version == 2 ? (int32_t)tok_le32(&d[12]) : 50256;
    if (version == 2 && (eot < -1 || eot >= (int32_t)n))
        runtime_error(remake, "llm.c tokenizer file '%s' has end-of-text id %d, outside -1..%u", path, eot, n - 1);
    if (eot >= (int32_t)n) eot = -1;
    tok_reset(tok);
    size_t pos = 1024;
    for (uint32_t i = 0; i < n; i++) {
        if (pos >= size) runtime_error(remake, "llm.c tokenizer file '%s' is truncated at token %u of %u", path, i, n);
        size_t len = d[pos++];
        if (len == 0 || len > size - pos) runtime_error(remake, "llm.c tokenizer file '%s' is corrupt at token %u of %u (length %zu)", path, i, n, len);
        tok_append(tok, &d[pos], len);
        pos += len;
    }
    tok->vocab_size = (int)n;
    tok->eot_id = eot;
    tok->encoder_missing = "an llm.c tokenizer file holds no merges (pass GPT-2's encoder.json with vocab.bpe beside it, or a vptok file)";
}

// ----------------------------------------------------------------------------
// format 1: GPT-2's encoder.json

// GPT-2's bytes_to_unicode(), inverted: unicode code point -> byte, for code points < 324.
// Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF are drawn as themselves; the remaining 68 bytes
// (0x00..0x20, 0x7F..0xA0, 0xAD), in increasing order, are drawn as U+0100, U+0101, ...
#define GPT2_UNICODE_LIMIT 324
inline void gpt2_unicode_to_byte(int table[GPT2_UNICODE_LIMIT]) {
    for (int i = 0; i < GPT2_UNICODE_LIMIT; i++) table[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        if (self) table[b] = b;
        else table[256 + n++] = b;
    }
}

struct TokJson {
    const unsigned char* p;
    size_t n, i;
    const char* path;
    int table[GPT2_UNICODE_LIMIT];
};

[[noreturn]] inline void tok_json_fail(const TokJson* j, const char* what) {
    // line and column of the failure, 1-based, so the user can look at the spot
    size_t line = 1, col = 1;
    for (size_t k = 0; k < j->i && k < j->n; k++) {
        if (j->p[k] == '\n') { line++; col = 1; } else col++;
    }
    runtime_error("pass GPT-2's encoder.json or a vptok file (export other tokenizers to vptok with the exporter script)",
                  "tokenizer file '%s', line %zu column %zu: %s", j->path, line, col, what);
}

inline void tok_json_ws(TokJson* j) {
    while (j->i < j->n && (j->p[j->i] == ' ' || j->p[j->i] == '\t' || j->p[j->i] == '\n' || j->p[j->i] == '\r')) j->i++;
}

inline void tok_json_expect(TokJson* j, char c, const char* what) {
    tok_json_ws(j);
    if (j->i >= j->n || j->p[j->i] != (unsigned char)c) tok_json_fail(j, what);
    j->i++;
}

inline int tok_json_hex4(TokJson* j) {
    if (j->n - j->i < 4) tok_json_fail(j, "truncated \\u escape");
    int v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned char c = j->p[j->i + k];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0) tok_json_fail(j, "bad hex digit in a \\u escape");
        v = v * 16 + d;
    }
    j->i += 4;
    return v;
}

// One code point of a JSON string body (after the opening quote); -1 at the closing quote.
inline long tok_json_char(TokJson* j) {
    if (j->i >= j->n) tok_json_fail(j, "unterminated string (the file is truncated?)");
    unsigned char c = j->p[j->i++];
    if (c == '"') return -1;
    if (c < 0x20) tok_json_fail(j, "raw control character inside a string");
    if (c == '\\') {
        if (j->i >= j->n) tok_json_fail(j, "unterminated escape");
        unsigned char e = j->p[j->i++];
        switch (e) {
            case '"': return '"';
            case '\\': return '\\';
            case '/': return '/';
            case 'b': return '\b';
            case 'f': return '\f';
            case 'n': return '\n';
            case 'r': return '\r';
            case 't': return '\t';
            case 'u': {
                long cp = tok_json_hex4(j);
                if (cp >= 0xDC00 && cp <= 0xDFFF) tok_json_fail(j, "unpaired low surrogate in a \\u escape");
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    // a character above U+FFFF is written as a surrogate pair \uD8xx\uDCxx
                    if (j->n - j->i < 2 || j->p[j->i] != '\\' || j->p[j->i + 1] != 'u') tok_json_fail(j, "high surrogate not followed by a \\u low surrogate");
                    j->i += 2;
                    long lo = tok_json_hex4(j);
                    if (lo < 0xDC00 || lo > 0xDFFF) tok_json_fail(j, "high surrogate not followed by a low surrogate");
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                return cp;
            }
            default: tok_json_fail(j, "unknown escape sequence in a string");
        }
    }
    if (c < 0x80) return c;
    // raw UTF-8: 2, 3 or 4 bytes
    int extra = (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
    if (extra < 0) tok_json_fail(j, "invalid UTF-8 in a string");
    long cp = c & (0x3F >> extra);
    for (int k = 0; k < extra; k++) {
        if (j->i >= j->n || (j->p[j->i] & 0xC0) != 0x80) tok_json_fail(j, "invalid UTF-8 in a string");
        cp = (cp << 6) | (j->p[j->i++] & 0x3F);
    }
    return cp;
}

// A key: the string's characters mapped back to GPT-2's bytes.
inline void tok_json_key(TokJson* j, std::string& out) {
    tok_json_expect(j, '"', "expected a \"token string\" key");
    out.clear();
    for (;;) {
        size_t at = j->i;
        long cp = tok_json_char(j);
        if (cp < 0) return;
        if (cp >= GPT2_UNICODE_LIMIT || j->table[cp] < 0) {
            j->i = at;
            char msg[160];
            snprintf(msg, sizeof(msg), "character U+%04lX is not in GPT-2's byte-level alphabet (is this GPT-2's encoder.json?)", cp);
            tok_json_fail(j, msg);
        }
        out.push_back((char)j->table[cp]);
    }
}

inline void tok_load_json(Tokenizer* tok, const char* path, const std::vector<unsigned char>& d) {
    TokJson j;
    j.p = d.data();
    j.n = d.size();
    j.i = 0;
    j.path = path;
    gpt2_unicode_to_byte(j.table);
    if (j.n >= 3 && j.p[0] == 0xEF && j.p[1] == 0xBB && j.p[2] == 0xBF) j.i = 3;  // UTF-8 byte order mark
    std::vector<std::string> keys;
    std::vector<long> ids;
    std::string key;
    tok_json_expect(&j, '{', "expected a JSON object '{'");
    tok_json_ws(&j);
    if (j.i < j.n && j.p[j.i] == '}') tok_json_fail(&j, "the JSON object is empty: no tokens");
    for (;;) {
        tok_json_key(&j, key);
        tok_json_expect(&j, ':', "expected ':' after a key");
        tok_json_ws(&j);
        // the value: a non-negative integer id, nothing else
        if (j.i >= j.n || j.p[j.i] < '0' || j.p[j.i] > '9') {
            tok_json_fail(&j, "expected a non-negative integer token id as the value; only GPT-2's flat encoder.json {\"token\": id, ...} is read as JSON (a Hugging Face tokenizer.json is not: export it to a vptok file)");
        }
        long id = 0;
        while (j.i < j.n && j.p[j.i] >= '0' && j.p[j.i] <= '9') {
            id = id * 10 + (j.p[j.i++] - '0');
            if (id > 0x7FFFFFFF) tok_json_fail(&j, "token id too large");
        }
        if (j.i < j.n && (j.p[j.i] == '.' || j.p[j.i] == 'e' || j.p[j.i] == 'E')) tok_json_fail(&j, "token id is not an integer");
        keys.push_back(key);
        ids.push_back(id);
        tok_json_ws(&j);
        if (j.i >= j.n) tok_json_fail(&j, "the file ends inside the object (truncated?)");
        if (j.p[j.i] == ',') { j.i++; continue; }
        if (j.p[j.i] == '}') { j.i++; break; }
        tok_json_fail(&j, "expected ',' or '}' after a token id");
    }
    tok_json_ws(&j);
    if (j.i != j.n) tok_json_fail(&j, "unexpected content after the JSON object");

    // the ids must be exactly 0..N-1, each once
    size_t n = ids.size();
    std::vector<long> slot(n, -1);  // id -> entry index
    for (size_t e = 0; e < n; e++) {
        if ((size_t)ids[e] >= n || slot[ids[e]] >= 0) {
            runtime_error("pass GPT-2's unmodified encoder.json",
                          "tokenizer file '%s': token id %ld is %s; the ids of %zu entries must be exactly 0..%zu",
                          path, ids[e], (size_t)ids[e] >= n ? "out of range" : "used twice", n, n - 1);
        }
        slot[ids[e]] = (long)e;
    }
    tok_reset(tok);
    for (size_t id = 0; id < n; id++) {
        const std::string& s = keys[slot[id]];
        tok_append(tok, (const unsigned char*)s.data(), s.size());
        if (s == "<|endoftext|>") tok->eot_id = (int)id;
    }
    tok->vocab_size = (int)n;
}

// GPT-2's merges, vocab.bpe: a "#version: ..." line, then one merge per line, "left right", both in
// the byte-level alphabet of encoder.json; line order is merge order.
inline void tok_load_vocab_bpe(Tokenizer* tok, const char* path) {
    const char* hint = "pass GPT-2's unmodified vocab.bpe beside its encoder.json (or remove it: samples still decode)";
    std::vector<unsigned char> d;
    tok_read_file(path, d);
    std::unordered_map<std::string, int> id_of;  // token bytes -> id, <|endoftext|> left out
    id_of.reserve((size_t)tok->vocab_size);
    for (int id = 0; id < tok->vocab_size; id++) {
        if (id != tok->eot_id) id_of.emplace(tok_bytes(tok, id), id);
    }
    std::vector<int> to_byte(GPT2_UNICODE_LIMIT);  // the byte-level alphabet back to bytes
    gpt2_unicode_to_byte(to_byte.data());
    size_t i = d.size() >= 3 && d[0] == 0xEF && d[1] == 0xBB && d[2] == 0xBF ? 3 : 0;
    int rank = 0;
    std::vector<uint32_t> cps;
    std::vector<size_t> starts;
    for (size_t line_no = 1; i < d.size(); line_no++) {
        size_t eol = i;
        while (eol < d.size() && d[eol] != '\n') eol++;
        size_t line_end = eol > i && d[eol - 1] == '\r' ? eol - 1 : eol;
        std::string line(d.begin() + i, d.begin() + line_end);
        i = eol + 1;
        if (line.empty() || (line_no == 1 && line[0] == '#')) continue;
        // "left right": two runs of the byte-level alphabet around one space, mapped back to bytes
        std::string half[2];
        int h = 0;
        bool in_alphabet = utf8_decode(line, &cps, &starts);
        for (size_t k = 0; in_alphabet && k < cps.size() && h < 2; k++) {
            if (cps[k] == ' ') h++;
            else if (cps[k] >= GPT2_UNICODE_LIMIT || to_byte[cps[k]] < 0) in_alphabet = false;
            else half[h].push_back((char)to_byte[cps[k]]);
        }
        if (!in_alphabet) runtime_error(hint, "'%s' line %zu: a character outside GPT-2's byte-level alphabet", path, line_no);
        if (h != 1 || half[0].empty() || half[1].empty()) runtime_error(hint, "'%s' line %zu is not \"left right\"", path, line_no);
        auto left = id_of.find(half[0]), right = id_of.find(half[1]), merged = id_of.find(half[0] + half[1]);
        if (left == id_of.end() || right == id_of.end() || merged == id_of.end()) {
            runtime_error(hint, "'%s' line %zu merges tokens that are not in the encoder.json beside it: mismatched files", path, line_no);
        }
        tok_add_merge(tok, rank++, left->second, right->second, merged->second, path, hint);
    }
    if (rank == 0) runtime_error(hint, "'%s' holds no merges", path);
    tok_find_byte_tokens(tok, path, hint);
    tok->encoder_kind = ENCODER_BYTE_BPE;
}

// ----------------------------------------------------------------------------
// public API

// path: GPT-2's encoder.json, a vptok file or an llm.c tokenizer file (detected from the content).
inline void tokenizer_init(Tokenizer* tok, const char* path) {
    std::vector<unsigned char> d;
    tok_read_file(path, d);
    uint32_t magic = d.size() >= 4 ? tok_le32(d.data()) : 0;
    if (magic == VPTOK_MAGIC) { tok_load_vptok(tok, path, d); return; }
    if (magic == LLMC_TOKENIZER_MAGIC) { tok_load_llmc(tok, path, d); return; }
    size_t i = (d.size() >= 3 && d[0] == 0xEF && d[1] == 0xBB && d[2] == 0xBF) ? 3 : 0;
    while (i < d.size() && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r')) i++;
    if (i < d.size() && d[i] == '{') {
        tok_load_json(tok, path, d);
        // GPT-2's merges beside encoder.json make it encode too
        std::string dir = path;
        size_t slash = dir.find_last_of('/');
        std::string merges = (slash == std::string::npos ? std::string() : dir.substr(0, slash + 1)) + "vocab.bpe";
        FILE* f = fopen(merges.c_str(), "rb");
        if (f) {
            fclose(f);
            tok_load_vocab_bpe(tok, merges.c_str());
        } else {
            tok->encoder_missing = "there is no vocab.bpe (GPT-2's merges) beside this encoder.json";
        }
        return;
    }
    runtime_error("pass GPT-2's encoder.json or a vptok file (export other tokenizers to vptok with the exporter script)",
                  "'%s' is not a tokenizer file: %s (%zu bytes; first 4 bytes as int32: %d; expected a JSON object or the vptok magic %d)",
                  path, d.empty() ? "it is empty" : "it is neither a JSON object nor a known binary format", d.size(),
                  (int32_t)magic, VPTOK_MAGIC);
}

// ----------------------------------------------------------------------------
// encoding

// GPT-2's pre-tokenizer, the regex
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (openai/gpt-2 encoder.py; tiktoken's r50k_base; HF's ByteLevel pre-tokenizer) written out by
// hand: cuts cp[begin, end) into pieces, appended to out as code-point index ranges [first, last).
// Python equivalent: regex.findall(pattern, text).
inline void gpt2_pretokenize(const std::vector<uint32_t>& cp, size_t begin, size_t end, std::vector<std::pair<size_t, size_t>>* out) {
    auto cls = [&](size_t k) {  // 0 letter, 1 number, 2 white space, 3 anything else
        return unicode_letter(cp[k]) ? 0 : unicode_number(cp[k]) ? 1 : unicode_space(cp[k]) ? 2 : 3;
    };
    size_t i = begin;
    while (i < end) {
        // the contractions: an apostrophe and s, t, m, d, ll, ve or re (case-sensitive)
        if (cp[i] == '\'' && i + 1 < end) {
            uint32_t a = cp[i + 1], b = i + 2 < end ? cp[i + 2] : 0;
            if (a == 's' || a == 't' || a == 'm' || a == 'd') { out->emplace_back(i, i + 2); i += 2; continue; }
            if ((a == 'l' && b == 'l') || (a == 'v' && b == 'e') || (a == 'r' && b == 'e')) { out->emplace_back(i, i + 3); i += 3; continue; }
        }
        // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional space, then a run of one class
        size_t j = (cp[i] == ' ' && i + 1 < end && cls(i + 1) != 2) ? i + 1 : i;
        int c = cls(j);
        if (c != 2) {
            size_t k = j + 1;
            while (k < end && cls(k) == c) k++;
            out->emplace_back(i, k);
            i = k;
            continue;
        }
        // "\s+(?!\S)" then "\s+": a run of white space, less its last character when a non-space
        // follows (that character then leads the next piece, as " word")
        size_t k = i + 1;
        while (k < end && cls(k) == 2) k++;
        if (k < end && k - i >= 2) k--;
        out->emplace_back(i, k);
        i = k;
    }
}

// The BPE merge loop shared by both kinds, over the symbols text[starts[s], starts[s + 1]):
// repeatedly merges the adjacent pair that `rate` ranks best (lowest key), the leftmost one on a
// tie, until `rate` accepts no pair. rate(left, right, &key, &merged_id) -> bool: may they merge.
// A heap of candidate pairs with stale entries skipped, so long inputs cost O(n log n), not O(n^2)
// (sentencepiece's bpe_model.cc and HF tokenizers' word merges work the same way).
struct BpeSymbol {
    size_t begin, end;  // bytes of the text
    int prev, next;     // neighbours in the list, -1 at the ends
    int id;             // kind 1: the token id; kind 2: unused (looked up at the end)
};
template <typename Rate>
inline void bpe_merge(std::vector<BpeSymbol>& sym, Rate rate) {
    struct Candidate {
        double key;
        int left, right;
        size_t size;  // left + right bytes when pushed: a different size means either side changed
        int merged;
    };
    auto worse = [](const Candidate& a, const Candidate& b) {
        return a.key != b.key ? a.key > b.key : a.left > b.left;  // min-heap on (key, position)
    };
    std::vector<Candidate> heap;
    auto consider = [&](int l, int r) {
        if (l < 0 || r < 0) return;
        double key;
        int merged = -1;
        if (rate(sym[l], sym[r], &key, &merged)) {
            heap.push_back(Candidate{key, l, r, sym[r].end - sym[l].begin, merged});
            std::push_heap(heap.begin(), heap.end(), worse);
        }
    };
    for (size_t s = 0; s + 1 < sym.size(); s++) consider((int)s, (int)s + 1);
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), worse);
        Candidate top = heap.back();
        heap.pop_back();
        BpeSymbol& l = sym[top.left];
        if (l.next != top.right || l.end == l.begin || sym[top.right].end - l.begin != top.size) continue;  // stale
        BpeSymbol& r = sym[top.right];
        l.end = r.end;
        l.id = top.merged;
        l.next = r.next;
        if (r.next >= 0) sym[r.next].prev = top.left;
        r.begin = r.end;  // dead: empty
        consider(l.prev, top.left);
        consider(top.left, l.next);
    }
}

// Byte-level BPE of text[first, last): appends the token ids.
inline void bpe_encode_bytes(const Tokenizer* tok, const std::string& text, size_t first, size_t last, std::vector<int>* ids) {
    std::vector<BpeSymbol> sym;
    sym.reserve(last - first);
    for (size_t b = first; b < last; b++) {
        int n = (int)sym.size();
        sym.push_back(BpeSymbol{b, b + 1, n - 1, b + 1 < last ? n + 1 : -1, tok->byte_token[(unsigned char)text[b]]});
    }
    bpe_merge(sym, [&](const BpeSymbol& l, const BpeSymbol& r, double* key, int* merged) {
        auto it = tok->merges.find(((uint64_t)(uint32_t)l.id << 32) | (uint32_t)r.id);
        if (it == tok->merges.end()) return false;
        *key = it->second.first;  // lower rank merges first
        *merged = it->second.second;
        return true;
    });
    for (int s = sym.empty() ? -1 : 0; s >= 0; s = sym[s].next) ids->push_back(sym[s].id);
}

inline void tokenizer_encode_byte_bpe(const Tokenizer* tok, const std::string& text, const std::vector<uint32_t>& cps,
                                      const std::vector<size_t>& starts, std::vector<int>* ids) {
    // the added tokens first: at each position the longest one that matches, the leftmost position
    // first (HF tokenizers' AddedVocabulary); the text between them goes through the regex and BPE
    size_t n = cps.size(), seg = 0;
    std::vector<std::pair<size_t, size_t>> words;
    auto flush = [&](size_t upto) {  // pre-tokenize and BPE the code points [seg, upto)
        words.clear();
        gpt2_pretokenize(cps, seg, upto, &words);
        for (auto& w : words) bpe_encode_bytes(tok, text, starts[w.first], starts[w.second], ids);
    };
    for (size_t i = 0; i < n && !tok->added.empty(); i++) {
        int best = -1;
        size_t best_len = 0;
        for (int id : tok->added) {
            size_t len = tok->length[id];
            if (len > best_len && text.size() - starts[i] >= len && memcmp(text.data() + starts[i], tok->bytes.data() + tok->offset[id], len) == 0) {
                best = id;
                best_len = len;
            }
        }
        if (best < 0) continue;
        size_t end_byte = starts[i] + best_len, j = i;
        while (starts[j] < end_byte) j++;
        if (starts[j] != end_byte) continue;  // it would end inside a character: not a match of text
        flush(i);
        ids->push_back(best);
        seg = j;
        i = j - 1;
    }
    flush(n);
}

inline void tokenizer_encode_sentencepiece(const Tokenizer* tok, const std::string& text, std::vector<int>* ids) {
    if (text.empty()) return;
    // the pieces store U+2581 as a space, so a literal U+2581 in the text is a space too
    std::string t = tok->add_dummy_prefix ? " " : "";
    for (size_t i = 0; i < text.size(); i++) {
        if (text.compare(i, 3, "\xE2\x96\x81") == 0) { t.push_back(' '); i += 2; }
        else t.push_back(text[i]);
    }
    std::vector<uint32_t> cps;
    std::vector<size_t> starts;
    utf8_decode(t, &cps, &starts);  // valid: checked by the caller
    std::vector<BpeSymbol> sym;
    for (size_t c = 0; c < cps.size(); c++) {
        int n = (int)sym.size();
        sym.push_back(BpeSymbol{starts[c], starts[c + 1], n - 1, c + 1 < cps.size() ? n + 1 : -1, -1});
    }
    std::string joined;
    bpe_merge(sym, [&](const BpeSymbol& l, const BpeSymbol& r, double* key, int* merged) {
        joined.assign(t, l.begin, r.end - l.begin);
        auto it = tok->pieces.find(joined);
        if (it == tok->pieces.end()) return false;
        *key = -(double)tok->score[it->second];  // higher score merges first
        *merged = it->second;
        return true;
    });
    for (int s = sym.empty() ? -1 : 0; s >= 0; s = sym[s].next) {
        auto it = tok->pieces.find(t.substr(sym[s].begin, sym[s].end - sym[s].begin));
        if (it != tok->pieces.end()) { ids->push_back(it->second); continue; }
        for (size_t b = sym[s].begin; b < sym[s].end; b++) {  // byte fallback: <0xNN> per UTF-8 byte
            int id = tok->byte_token[(unsigned char)t[b]];
            if (id < 0) { id = tok->unk_id; b = sym[s].end - 1; }  // no byte pieces: one unk per character
            if (id >= 0) ids->push_back(id);
        }
    }
}

inline bool tokenizer_can_encode(const Tokenizer* tok) { return tok->encoder_kind != ENCODER_NONE; }

// Encodes text (UTF-8) as ordinary text: special tokens written in it are not matched (the Python
// side's encode: tiktoken's encode_ordinary, HF with encode_special_tokens, sentencepiece's
// encode). No delimiter is added. Returns false, ids untouched, if text is not valid UTF-8.
// Call only where tokenizer_can_encode(tok).
inline bool tokenizer_encode(const Tokenizer* tok, const std::string& text, std::vector<int>* ids) {
    std::vector<uint32_t> cps;
    std::vector<size_t> starts;
    if (!utf8_decode(text, &cps, &starts)) return false;
    ids->clear();
    if (tok->encoder_kind == ENCODER_BYTE_BPE && tok->normalize_nfc) {
        std::string normalized = utf8_encode(unicode_nfc(cps));
        utf8_decode(normalized, &cps, &starts);  // valid: made from valid code points
        tokenizer_encode_byte_bpe(tok, normalized, cps, starts, ids);
    } else if (tok->encoder_kind == ENCODER_BYTE_BPE) tokenizer_encode_byte_bpe(tok, text, cps, starts, ids);
    else if (tok->encoder_kind == ENCODER_SENTENCEPIECE) tokenizer_encode_sentencepiece(tok, text, ids);
    return true;
}

// The bytes of token id, NUL-terminated (a token that contains a 0 byte reads as shorter; use
// tokenizer_print for exact bytes). An id outside the vocabulary gives a visible placeholder
// "<|id:123|>" held in a per-thread buffer that the next such call overwrites.
inline const char* tokenizer_decode(const Tokenizer* tok, int id) {
    if (id < 0 || id >= tok->vocab_size) {
        static thread_local char placeholder[32];
        snprintf(placeholder, sizeof(placeholder), "<|id:%d|>", id);
        return placeholder;
    }
    return tok->bytes.data() + tok->offset[id];
}

inline int tokenizer_eot(const Tokenizer* tok) { return tok->eot_id; }

inline int tokenizer_vocab_size(const Tokenizer* tok) { return tok->vocab_size; }

inline void tokenizer_free(Tokenizer* tok) {
    tok_reset(tok);
    std::vector<char>().swap(tok->bytes);
    std::vector<size_t>().swap(tok->offset);
    std::vector<size_t>().swap(tok->length);
}

// Writes the bytes of ids[0..n) to out exactly as stored (no escaping, no UTF-8 repair), so
// multi-byte characters split across tokens come out whole. Out-of-range ids print "<|id:N|>".
inline void tokenizer_print(const Tokenizer* tok, const int* ids, int n, FILE* out) {
    for (int i = 0; i < n; i++) {
        int id = ids[i];
        if (id < 0 || id >= tok->vocab_size) {
            fputs(tokenizer_decode(tok, id), out);
        } else if (tok->length[id] > 0) {
            fwrite(tok->bytes.data() + tok->offset[id], 1, tok->length[id], out);
        }
    }
    fflush(out);
}
