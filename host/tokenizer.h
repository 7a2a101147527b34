// host/tokenizer.h: decodes token ids to bytes, for printing samples. (No encoding: the trainer only
// ever reads pre-tokenized shards, see host/dataloader.h.)
//
// Three file formats are read; the format is detected from the content, never the file name:
//
// 1. GPT-2's encoder.json: a flat JSON object {"token string": id, ...} (50257 entries). The token
//    strings are in GPT-2's byte-level alphabet: every byte 0..255 is drawn as one unicode character
//    (bytes_to_unicode() of openai/gpt-2's encoder.py: printable latin-1 bytes map to themselves,
//    the other 68 to U+0100..U+0143), written raw as UTF-8 or as \uXXXX escapes. We map each
//    character back to its byte. The end-of-text id is the id of "<|endoftext|>" (50256).
//    Only this flat object-of-string-to-int shape is accepted; anything else is refused.
//
// 2. valuepath's compact "vptok" file, so any tokenizer (NeoX, Llama-2, ...) can be decoded without
//    a parser for its own format (a Python exporter writes it; see docs/formats.md):
//      header: 256 little-endian int32 (1024 bytes)
//        [0] magic 20261122
//        [1] version 1
//        [2] vocab size N (>= 1)
//        [3] end-of-text id, or -1 if there is none
//        [4..255] 0
//      then for each id 0..N-1: a little-endian uint32 byte length L, then L raw bytes.
//      The file ends right after the last token (trailing bytes are an error).
//
// 3. llm.c's tokenizer file (gpt2_tokenizer.bin): header 256 little-endian uint32 with [0] magic
//    20240328, [1] version 1 or 2, [2] vocab size, [3] end-of-text id (version 2; version 1 means
//    50256); then for each id a uint8 length L >= 1 and L bytes.
//
// A decoded token is raw bytes: it may be a partial UTF-8 sequence (GPT-2 splits multi-byte
// characters across tokens), so print the bytes as-is and let the terminal join them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "host/utils.h"

#define VPTOK_MAGIC 20261122
#define VPTOK_VERSION 1
#define VPTOK_HEADER_BYTES 1024
#define LLMC_TOKENIZER_MAGIC 20240328

struct Tokenizer {
    int vocab_size = 0;
    int eot_id = -1;            // -1 if unknown
    std::vector<char> bytes;    // every token's bytes, each followed by a NUL
    std::vector<size_t> offset; // (vocab_size) start of token i in bytes
    std::vector<size_t> length; // (vocab_size) byte length of token i, without the NUL
};

// ----------------------------------------------------------------------------
// building the table

inline void tok_reset(Tokenizer* tok) {
    tok->vocab_size = 0;
    tok->eot_id = -1;
    tok->bytes.clear();
    tok->offset.clear();
    tok->length.clear();
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

inline void tok_load_vptok(Tokenizer* tok, const char* path, const std::vector<unsigned char>& d) {
    const char* remake = "the tokenizer file is corrupt; re-export it with the exporter script";
    size_t size = d.size();
    if (size < VPTOK_HEADER_BYTES) {
        runtime_error(remake, "tokenizer file '%s' is truncated: %zu bytes, shorter than the %d-byte vptok header", path, size, VPTOK_HEADER_BYTES);
    }
    int32_t version = (int32_t)tok_le32(&d[4]);
    int32_t n = (int32_t)tok_le32(&d[8]);
    int32_t eot = (int32_t)tok_le32(&d[12]);
    if (version != VPTOK_VERSION) {
        runtime_error("re-export the tokenizer, or update valuepath", "tokenizer file '%s' has vptok version %d; only version %d is supported", path, version, VPTOK_VERSION);
    }
    if (n <= 0) runtime_error(remake, "tokenizer file '%s' has vocab size %d; it must be at least 1", path, n);
    if (eot < -1 || eot >= n) runtime_error(remake, "tokenizer file '%s' has end-of-text id %d, outside -1..%d", path, eot, n - 1);
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
    if (pos != size) {
        runtime_error(remake, "tokenizer file '%s' has %zu bytes of trailing garbage after its %d tokens (file is %zu bytes, tokens end at %zu)",
                      path, size - pos, n, size, pos);
    }
    tok->vocab_size = n;
    tok->eot_id = eot;
}

inline void tok_load_llmc(Tokenizer* tok, const char* path, const std::vector<unsigned char>& d) {
    const char* remake = "the tokenizer file is corrupt; re-create it (llm.c: python train_gpt2.py writes gpt2_tokenizer.bin)";
    size_t size = d.size();
    if (size < 1024) runtime_error(remake, "llm.c tokenizer file '%s' is truncated: %zu bytes, shorter than the 1024-byte header", path, size);
    uint32_t version = tok_le32(&d[4]);
    uint32_t n = tok_le32(&d[8]);
    if (version != 1 && version != 2) runtime_error(remake, "llm.c tokenizer file '%s' has unknown version %u", path, version);
    if (n == 0 || n > (uint32_t)(size - 1024) / 2) runtime_error(remake, "llm.c tokenizer file '%s' has an impossible vocab size %u for its size %zu", path, n, size);
    int32_t eot = version == 2 ? (int32_t)tok_le32(&d[12]) : 50256;
    if (eot < -1 || eot >= (int32_t)n) eot = -1;
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
    if (i < d.size() && d[i] == '{') { tok_load_json(tok, path, d); return; }
    runtime_error("pass GPT-2's encoder.json or a vptok file (export other tokenizers to vptok with the exporter script)",
                  "'%s' is not a tokenizer file: %s (%zu bytes; first 4 bytes as int32: %d; expected a JSON object or the vptok magic %d)",
                  path, d.empty() ? "it is empty" : "it is neither a JSON object nor a known binary format", d.size(),
                  (int32_t)magic, VPTOK_MAGIC);
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
